// The playground: a multi-turn chat that streams from this server's /v1/chat/completions, with
// sampling parameters, chunk boundaries, and each answer's TTFT and tokens/s.

import { ApiError, apiKey, explain, modelInfo, streamChat } from "./api.js";

const $ = (id) => document.getElementById(id);
const PARAMS_STORAGE = "llmflow.playground.params";
/** the model picked last, when the server serves several */
const MODEL_STORAGE = "llmflow.playground.model";
/** Number inputs: element id -> request field. Sent as typed; the server validates them. */
const NUMBER_FIELDS = [
  ["temperature", "temperature"],
  ["top-p", "top_p"],
  ["top-k", "top_k"],
  ["max-tokens", "max_tokens"],
  ["seed", "seed"],
];
const SAVED_FIELDS = ["system-prompt", "temperature", "top-p", "top-k", "max-tokens", "seed", "stop"];
const FINISH_LABELS = { stop: "done", length: "hit max_tokens", cancelled: "cancelled", stopped: "stopped" };

const state = {
  /** the model requests go to; each answer is labelled with the one that wrote it */
  model: null,
  /** what loadInfo learnt: {models, defaultModel, engine} */
  info: null,
  /** {role, content, ok, el}; the next request sends the ok ones */
  turns: [],
  /** the AbortController of the answer being streamed, or null */
  controller: null,
  /** false for a plain MLflow pyfunc model, which has no chat route */
  canChat: true,
};

// -- the request ----------------------------------------------------------------------------------
function requestParams() {
  const params = {};
  for (const [id, field] of NUMBER_FIELDS) {
    const raw = $(id).value.trim();
    if (raw !== "") params[field] = Number(raw);
  }
  const stops = $("stop").value.split("\n").filter((line) => line !== "").map(unescapeStop);
  if (stops.length) params.stop = stops;
  return params;
}

function unescapeStop(line) {
  return line.replace(/\\([nt\\])/g, (_, c) => ({ n: "\n", t: "\t", "\\": "\\" })[c]);
}

function requestMessages() {
  const messages = [];
  const system = $("system-prompt").value.trim();
  if (system) messages.push({ role: "system", content: system });
  for (const turn of state.turns) {
    if (turn.ok) messages.push({ role: turn.role, content: turn.content });
  }
  return messages;
}

// -- the transcript -------------------------------------------------------------------------------
const transcript = $("transcript");

function addTurn(role, content) {
  $("empty-hint")?.remove();
  const el = document.createElement("article");
  el.className = `turn ${role}`;
  const who = document.createElement("h2");
  who.className = "who";
  who.textContent = role === "user" ? "You" : state.model || "Model";
  const body = document.createElement("div");
  body.className = "content";
  body.textContent = content;
  el.append(who, body);
  if (role === "assistant") {
    const stats = document.createElement("p");
    stats.className = "stats";
    stats.setAttribute("aria-live", "off");
    el.append(stats);
  }
  transcript.append(el);
  const turn = { role, content, ok: true, el };
  state.turns.push(turn);
  return turn;
}

function removeTurn(turn) {
  turn.el.remove();
  state.turns = state.turns.filter((t) => t !== turn);
}

function nearBottom() {
  return transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 48;
}

/** One streamed chunk, in its own span, so that the boundaries can be shown. */
function appendChunk(turn, text) {
  const follow = nearBottom();
  const span = document.createElement("span");
  span.className = "chunk";
  span.textContent = text;
  turn.el.querySelector(".content").append(span);
  turn.content += text;
  if (follow) transcript.scrollTop = transcript.scrollHeight;
}

function showError(turn, error) {
  const { title, detail } = explain(error);
  const box = document.createElement("div");
  box.className = "error";
  box.setAttribute("role", "alert");
  box.dataset.status = String(error.status ?? "");
  box.dataset.code = error.code ?? "";
  const strong = document.createElement("strong");
  strong.textContent = title;
  box.append(strong, detail);
  turn.el.querySelector(".stats").before(box);
  transcript.scrollTop = transcript.scrollHeight;
}

function showNotice(text) {
  const notice = $("notice");
  notice.textContent = text;
  notice.hidden = !text;
}

// -- timing ---------------------------------------------------------------------------------------
/** Client-side clock of one answer: TTFT from sending, decode rate as the server counts it
 * (tokens after the first over the time after the first). */
class AnswerClock {
  constructor() {
    this.sent = performance.now();
    this.first = null;
    this.last = null;
    this.chunks = 0;
  }

  chunk() {
    const now = performance.now();
    if (this.first === null) this.first = now;
    this.last = now;
    this.chunks += 1;
  }

  get ttftMs() {
    return this.first === null ? null : this.first - this.sent;
  }

  tokensPerS(tokens) {
    if (this.first === null || tokens < 2 || this.last <= this.first) return null;
    return (tokens - 1) / ((this.last - this.first) / 1000);
  }
}

function renderStats(turn, clock, usage, finish) {
  const el = turn.el.querySelector(".stats");
  // until the usage chunk arrives, chunks stand in for tokens (llama.cpp sends about one per token)
  const tokens = usage ? usage.completion_tokens : clock.chunks;
  const rate = clock.tokensPerS(tokens);
  const parts = [];
  if (clock.ttftMs !== null) parts.push(`TTFT ${Math.round(clock.ttftMs)} ms`);
  if (rate !== null) parts.push(`${usage ? "" : "≈"}${rate.toFixed(1)} tok/s`);
  if (usage) parts.push(`${tokens} tokens`, `prompt ${usage.prompt_tokens}`);
  else if (clock.chunks) parts.push(`${clock.chunks} chunks`);
  if (finish === "stopped" && !clock.chunks) parts.push("stopped before the first token");
  else if (finish) parts.push(FINISH_LABELS[finish] || finish);
  el.textContent = parts.join(" · ");
  Object.assign(el.dataset, {
    ttftMs: clock.ttftMs === null ? "" : clock.ttftMs.toFixed(1),
    tokensPerS: rate === null ? "" : rate.toFixed(2),
    tokens: String(tokens),
    chunks: String(clock.chunks),
    finish: finish || "",
  });
}

// -- sending --------------------------------------------------------------------------------------
function setStreaming(controller) {
  state.controller = controller;
  $("send").disabled = controller !== null || !state.canChat;
  $("stop-button").disabled = controller === null;
}

async function send() {
  const prompt = $("prompt");
  const text = prompt.value;
  if (state.controller || !state.canChat || !text.trim()) return;
  if (!state.model && !(await loadInfo())) return;
  prompt.value = "";
  const user = addTurn("user", text);
  const answer = addTurn("assistant", "");
  answer.ok = false;
  transcript.scrollTop = transcript.scrollHeight;
  const body = {
    model: state.model,
    messages: requestMessages(),
    stream: true,
    stream_options: { include_usage: true },
    ...requestParams(),
  };
  const failure = await streamAnswer(answer, body);
  answer.ok = answer.content !== "";
  if (failure instanceof ApiError && failure.status === 401 && !answer.ok && (await askKey(keyReason()))) {
    removeTurn(answer);
    removeTurn(user);
    prompt.value = text;
    return send();
  }
  if (failure) showError(answer, failure);
  if (!answer.ok) {
    // nothing came back: leave this exchange out of the conversation and give the text back
    user.ok = false;
    user.el.classList.add("failed");
    if (!prompt.value.trim()) prompt.value = text;
  }
}

/** Stream one answer into `answer`; returns the error that ended it, or null. */
async function streamAnswer(answer, body) {
  const controller = new AbortController();
  const clock = new AnswerClock();
  let usage = null;
  let finish = null;
  const onChunk = (chunk) => {
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices?.[0];
    const text = choice?.delta?.content;
    if (text) {
      clock.chunk();
      appendChunk(answer, text);
    }
    if (choice?.finish_reason) finish = choice.finish_reason;
    renderStats(answer, clock, usage, finish);
  };
  setStreaming(controller);
  answer.el.setAttribute("aria-busy", "true");
  let failure = null;
  try {
    await streamChat(body, { signal: controller.signal, onChunk });
  } catch (error) {
    if (error.name === "AbortError") finish = "stopped";
    else failure = error;
  } finally {
    answer.el.setAttribute("aria-busy", "false");
    renderStats(answer, clock, usage, finish);
    setStreaming(null);
  }
  return failure;
}

function stop() {
  state.controller?.abort();
}

function newChat() {
  stop();
  state.turns = [];
  transcript.replaceChildren();
  const hint = document.createElement("p");
  hint.className = "empty";
  hint.id = "empty-hint";
  hint.textContent = "New chat. Ask something.";
  transcript.append(hint);
  $("prompt").focus();
}

// -- the model and the API key --------------------------------------------------------------------
async function loadInfo() {
  try {
    const info = await modelInfo();
    state.info = info;
    fillPicker(info);
    pickModel($("model-select").value || info.defaultModel);
    return true;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401 && (await askKey(keyReason()))) return loadInfo();
    const { title, detail } = explain(error);
    showNotice(`${title}: ${detail}`);
    $("model-name").textContent = "unavailable";
    return false;
  }
}

/** A picker of every served model when there are several (the last one picked, else the default). */
function fillPicker(info) {
  const select = $("model-select");
  const several = info.models.length > 1;
  select.replaceChildren(
    ...info.models.map((name) => {
      const option = document.createElement("option");
      option.value = option.textContent = name;
      return option;
    }),
  );
  const saved = localStorage.getItem(MODEL_STORAGE);
  select.value = several && info.models.includes(saved) ? saved : info.defaultModel;
  $("model-picker").hidden = !several;
  $("model-name").hidden = several;
}

/** Chat with `model` from now on. Only the default model's engine is known (from /version): only
 * it can be a plain MLflow pyfunc model that has no chat route. */
function pickModel(model) {
  const { defaultModel, engine } = state.info;
  state.model = model;
  $("model-name").textContent = model;
  $("engine-name").textContent = model !== defaultModel ? "" : (engine ?? "MLflow pyfunc");
  state.canChat = !(model === defaultModel && engine === null);
  $("send").disabled = !state.canChat || state.controller !== null;
  showNotice(
    state.canChat
      ? ""
      : `${model} is a plain MLflow pyfunc model: it is served at POST /invocations, ` +
          "not through the chat API this page uses.",
  );
}

function keyReason() {
  return apiKey.get()
    ? "The server rejected this API key. Enter the right one."
    : "This server needs an API key.";
}

let keyAnswered = null;

/** Ask for the key; resolves true when one was given, false when the dialog was dismissed. */
function askKey(reason) {
  const dialog = $("key-dialog");
  $("key-reason").textContent = reason;
  $("api-key").value = "";
  $("key-forget").hidden = !apiKey.get();
  keyAnswered?.(false); // a question still open is answered by this one
  if (!dialog.open) dialog.showModal();
  return new Promise((resolve) => {
    keyAnswered = resolve;
  });
}

function closeKeyDialog(given) {
  const answered = keyAnswered;
  keyAnswered = null;
  if ($("key-dialog").open) $("key-dialog").close();
  answered?.(given);
}

// -- settings -------------------------------------------------------------------------------------
function saveParams() {
  const saved = Object.fromEntries(SAVED_FIELDS.map((id) => [id, $(id).value]));
  saved["show-chunks"] = $("show-chunks").checked;
  localStorage.setItem(PARAMS_STORAGE, JSON.stringify(saved));
}

function restoreParams() {
  let saved = {};
  try {
    saved = JSON.parse(localStorage.getItem(PARAMS_STORAGE) || "{}") || {};
  } catch {
    // a stale or foreign value: start from defaults
  }
  for (const id of SAVED_FIELDS) {
    if (typeof saved[id] === "string") $(id).value = saved[id];
  }
  $("show-chunks").checked = saved["show-chunks"] === true;
  showChunks();
}

function showChunks() {
  transcript.classList.toggle("show-chunks", $("show-chunks").checked);
}

function resetParams() {
  for (const id of SAVED_FIELDS) $(id).value = "";
  saveParams();
}

// -- wiring ---------------------------------------------------------------------------------------
function wire() {
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("prompt").addEventListener("keydown", (event) => {
    // Enter sends; Shift+Enter is a newline; Enter that confirms an IME composition is neither
    if (event.key !== "Enter" || event.shiftKey || event.isComposing || event.keyCode === 229) return;
    event.preventDefault();
    send();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.controller && !$("key-dialog").open) stop();
  });
  $("stop-button").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newChat);
  $("params-form").addEventListener("input", saveParams);
  $("params-form").addEventListener("submit", (event) => event.preventDefault());
  $("show-chunks").addEventListener("change", showChunks);
  $("reset-params").addEventListener("click", resetParams);
  $("model-select").addEventListener("change", (event) => {
    localStorage.setItem(MODEL_STORAGE, event.target.value);
    pickModel(event.target.value);
  });
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) return;
    apiKey.set(key);
    closeKeyDialog(true);
  });
  $("key-cancel").addEventListener("click", () => closeKeyDialog(false));
  $("key-forget").addEventListener("click", () => {
    apiKey.forget();
    closeKeyDialog(false);
  });
  $("key-dialog").addEventListener("close", () => closeKeyDialog(false));
  $("key-button").addEventListener("click", async () => {
    if ((await askKey("Set the API key this server expects.")) && !state.model) await loadInfo();
  });
}

wire();
restoreParams();
if (matchMedia("(max-width: 800px)").matches) $("params").open = false;
loadInfo();
