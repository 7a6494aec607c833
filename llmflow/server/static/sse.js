// Server-sent events read from a fetch() body: bytes in, one callback per event's data.
// Network chunks may split an event anywhere: inside a line, between "\r" and "\n", or inside a
// UTF-8 character. Only `data` fields matter here (OpenAI streams use nothing else); `event`
// names are passed along, comments (": ping") are skipped.

export class SseParser {
  #decoder = new TextDecoder("utf-8");
  #buffer = "";
  #data = [];
  #event = "";
  #onEvent;

  /** onEvent(data, eventName) is called once per complete event that has data. */
  constructor(onEvent) {
    this.#onEvent = onEvent;
  }

  /** Feed the next piece of the body (a Uint8Array, or a string in tests). */
  push(piece) {
    this.#buffer += typeof piece === "string" ? piece : this.#decoder.decode(piece, { stream: true });
    this.#drain(false);
  }

  /** The body ended: an event cut off before its blank line still counts. */
  end() {
    this.#buffer += this.#decoder.decode();
    this.#drain(true);
    if (this.#buffer) this.#line(this.#buffer);
    this.#buffer = "";
    this.#dispatch();
  }

  #drain(final) {
    const buffer = this.#buffer;
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      if (c === 13 && i + 1 === buffer.length && !final) break; // maybe the first half of \r\n
      this.#line(buffer.slice(start, i));
      if (c === 13 && buffer.charCodeAt(i + 1) === 10) i++;
      start = i + 1;
    }
    this.#buffer = buffer.slice(start);
  }

  #line(line) {
    if (line === "") return this.#dispatch();
    if (line.startsWith(":")) return; // a comment: keep-alive pings
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "event") this.#event = value;
  }

  #dispatch() {
    const data = this.#data;
    const event = this.#event;
    this.#data = [];
    this.#event = "";
    if (data.length) this.#onEvent(data.join("\n"), event);
  }
}

/** Read a whole SSE body, calling onEvent(data, eventName) per event. Rejects when the request is
 * aborted or onEvent throws (the body is then cancelled). */
export async function readSse(body, onEvent) {
  const parser = new SseParser(onEvent);
  const reader = body.getReader();
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parser.push(value);
    }
    finished = true;
    parser.end();
  } finally {
    if (!finished) reader.cancel().catch(() => {}); // stop downloading what nobody will read
  }
}
