// Talking to this server: authorized requests, OpenAI-shaped errors, a streamed chat answer.
// URLs are relative, so the page also works behind a proxy that serves it under a path prefix.

import { readSse } from "./sse.js";

const KEY_STORAGE = "llmflow.apiKey";

/** The API key lives in this tab's sessionStorage only: never in localStorage, never in a URL. */
export const apiKey = {
  get: () => sessionStorage.getItem(KEY_STORAGE) || "",
  set: (key) => sessionStorage.setItem(KEY_STORAGE, key),
  forget: () => sessionStorage.removeItem(KEY_STORAGE),
};

/** An HTTP error answer (status > 0), a failure reported inside a stream (status 0, inStream),
 * or a server that cannot be reached (status 0). */
export class ApiError extends Error {
  constructor(message, { status = 0, code = null, param = null, type = null, retryAfter = null,
    inStream = false } = {}) {
    super(message);
    this.name = "ApiError";
    Object.assign(this, { status, code, param, type, retryAfter, inStream });
  }
}

async function errorFrom(response) {
  let detail = {};
  try {
    detail = (await response.json()).error || {};
  } catch {
    // not JSON: a proxy's page, for instance
  }
  return new ApiError(detail.message || response.statusText || `HTTP ${response.status}`, {
    status: response.status,
    code: detail.code ?? null,
    param: detail.param ?? null,
    type: detail.type ?? null,
    retryAfter: response.headers.get("Retry-After"),
  });
}

async function request(path, init = {}) {
  const headers = new Headers(init.headers || {});
  const key = apiKey.get();
  if (key) headers.set("Authorization", `Bearer ${key}`);
  let response;
  try {
    response = await fetch(path, { ...init, headers, cache: "no-store" });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(`cannot reach the server (${error.message})`);
  }
  if (!response.ok) throw await errorFrom(response);
  return response;
}

/** The served models' names (the first is the server's default) and the default model's engine
 * (null: a plain MLflow pyfunc model, /invocations only). */
export async function modelInfo() {
  const models = await (await request("v1/models")).json();
  const version = await (await request("version")).json();
  return {
    models: models.data.map((card) => card.id),
    defaultModel: version.model ?? models.data[0].id,
    engine: version.engine ?? null,
    llmflow: version.llmflow,
  };
}

/** POST a streaming chat request; onChunk(chunk) gets each parsed `chat.completion.chunk`.
 * Resolves at `[DONE]` (or the end of the body); throws ApiError for errors, before or during the
 * stream, and the AbortError of `signal`. */
export async function streamChat(body, { signal, onChunk }) {
  const response = await request("v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal,
  });
  const DONE = {};
  try {
    await readSse(response.body, (data) => {
      if (data === "[DONE]") throw DONE;
      const chunk = JSON.parse(data);
      if (chunk.error) {
        const { message, code = null, type = null, param = null } = chunk.error;
        throw new ApiError(message || "the generation failed", { code, type, param, inStream: true });
      }
      onChunk(chunk);
    });
  } catch (error) {
    if (error !== DONE) throw error;
  }
}

/** A title and a sentence for an error, as the page shows it. */
export function explain(error) {
  if (!(error instanceof ApiError)) {
    return { title: "Something went wrong in the page", detail: String(error?.message || error) };
  }
  const detail = sentence(error.message);
  const retry = error.retryAfter ? ` Try again in ${error.retryAfter} s.` : "";
  if (error.inStream) return { title: "The generation failed", detail };
  switch (error.status) {
    case 0:
      return { title: "Cannot reach the server", detail };
    case 400:
      if (error.code === "context_length_exceeded") {
        return {
          title: "Too long for the model's context window (HTTP 400)",
          detail: `${detail} Start a new chat or shorten the message.`,
        };
      }
      return { title: `Invalid ${error.param || "request"} (HTTP 400)`, detail };
    case 401:
      return { title: "API key needed (HTTP 401)", detail };
    case 404:
      return { title: "Not available (HTTP 404)", detail };
    case 413:
      return { title: "Request too large (HTTP 413)", detail };
    case 429:
      return { title: "The server is busy (HTTP 429)", detail: `${detail}${retry}` };
    case 503:
      return { title: "The server is overloaded (HTTP 503)", detail: `${detail}${retry}` };
    case 504:
      return { title: "Timed out (HTTP 504)", detail };
    default:
      return { title: `Server error (HTTP ${error.status})`, detail };
  }
}

function sentence(text) {
  const trimmed = String(text).trim();
  const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return /[.!?]$/.test(capital) ? capital : `${capital}.`;
}
