/**
 * The chat page (served at `/` to browsers by ts/server/routes/ui.ts): conversations in
 * IndexedDB with a list, per-conversation model, system prompt and sampling settings, streamed
 * answers with stop (Esc) and regenerate, editing a past message as a new branch, images by
 * paste / drop / file, the API key asked for once and kept in localStorage, light/dark.
 */
import { apiKey, ApiError } from "./api.ts";
import { generate } from "./chat.ts";
import { branch, db, deepest, DEFAULT_SETTINGS, newId, siblings, type Conversation, type Message } from "./db.ts";
import { modelPicker, pullForm } from "./models.ts";
import { editView, messageView, type MessageActions } from "./view.ts";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const app = $("app");
const list = $("conversations");
const messagesEl = $("messages");
const input = $<HTMLTextAreaElement>("input");
const banner = $("banner");

let convs: Conversation[] = [];
let cur: Conversation | null = null;
let running: { ctrl: AbortController; id: string } | null = null;
let editing: string | null = null;
let attached: string[] = [];

function showBanner(msg: string | null): void {
  banner.hidden = !msg;
  banner.textContent = msg ?? "";
}
// Never a blank page: anything unexpected is said at the top.
window.addEventListener("error", (e) => showBanner(`Page error: ${e.message}`));
window.addEventListener("unhandledrejection", (e) => showBanner(`Page error: ${(e.reason as Error)?.message ?? String(e.reason)}`));

// ---- theme
const THEMES = ["auto", "light", "dark"] as const;
function applyTheme(t: string): void {
  if (t === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = t;
  const b = $("theme");
  b.textContent = { auto: "◐ Auto", light: "☀ Light", dark: "☾ Dark" }[t as "auto"];
  b.title = `Theme: ${t === "auto" ? "follows the system" : t} (click to change)`;
}
applyTheme(localStorage.getItem("wick.theme") ?? "auto");
$("theme").addEventListener("click", () => {
  const next = THEMES[(THEMES.indexOf((localStorage.getItem("wick.theme") ?? "auto") as "auto") + 1) % 3];
  localStorage.setItem("wick.theme", next);
  applyTheme(next);
});

// ---- API key
const keyForm = $<HTMLFormElement>("key-form");
function askKey(reason: string): void {
  $("key-reason").textContent = reason;
  keyForm.hidden = false;
  $<HTMLInputElement>("key-input").focus();
}
keyForm.addEventListener("submit", (e) => {
  e.preventDefault();
  apiKey.set($<HTMLInputElement>("key-input").value.trim());
  $<HTMLInputElement>("key-input").value = "";
  keyForm.hidden = true;
  void refreshModels();
});
$("key-button").addEventListener("click", () =>
  keyForm.hidden
    ? askKey(apiKey.get() ? "A key is saved in this browser. Enter a new one (empty clears it)." : "Enter the server's API key (--api-key). It stays in this browser.")
    : (keyForm.hidden = true),
);

function reportError(err: unknown): void {
  const msg = (err as Error).message ?? String(err);
  if (err instanceof ApiError && err.unauthorized) askKey(msg);
  showBanner(msg);
}

// ---- models
const picker = modelPicker((name) => {
  if (cur && !running) {
    cur.model = name;
    void save(cur);
  }
});
async function refreshModels(): Promise<void> {
  try {
    await picker.refresh();
    showBanner(null);
    if (cur?.model) picker.select(cur.model);
  } catch (err) {
    reportError(err);
  }
}
pullForm(picker, (name) => {
  if (cur) cur.model = name;
});

// ---- settings
const fields = ["temperature", "top_p", "max_tokens", "seed"] as const;
$("settings-button").addEventListener("click", () => ($("settings").hidden = !$("settings").hidden));
function showSettings(): void {
  const c = cur;
  $<HTMLTextAreaElement>("system").value = c?.system ?? "";
  for (const f of fields) $<HTMLInputElement>(f).value = c?.settings[f] == null ? "" : String(c.settings[f]);
  $<HTMLTextAreaElement>("tools").value = c?.settings.tools ?? "";
}
$("settings").addEventListener("input", () => {
  const c = ensureConversation();
  c.system = $<HTMLTextAreaElement>("system").value;
  for (const f of fields) {
    const v = $<HTMLInputElement>(f).value.trim();
    c.settings[f] = v === "" || !Number.isFinite(Number(v)) ? null : Number(v);
  }
  c.settings.tools = $<HTMLTextAreaElement>("tools").value;
  void save(c);
});

// ---- conversations
async function save(c: Conversation): Promise<void> {
  c.updated = Date.now();
  if (!convs.includes(c)) convs.unshift(c);
  await db.put(c);
  renderList();
}

function ensureConversation(): Conversation {
  if (cur) return cur;
  cur = { id: newId(), title: "New chat", model: picker.value(), system: "", settings: { ...DEFAULT_SETTINGS }, messages: {}, leaf: null, updated: Date.now() };
  return cur;
}

function renderList(): void {
  list.replaceChildren(
    ...convs
      .filter((c) => c.leaf)
      .sort((a, b) => b.updated - a.updated)
      .map((c) => {
        const row = document.createElement("div");
        row.className = `conv${c === cur ? " active" : ""}`;
        const open = document.createElement("button");
        open.type = "button";
        open.textContent = c.title;
        open.title = c.title;
        open.addEventListener("click", () => select(c));
        const del = document.createElement("button");
        del.type = "button";
        del.className = "link";
        del.textContent = "✕";
        del.title = "Delete this conversation";
        del.addEventListener("click", () => {
          if (!confirm(`Delete "${c.title}"?`)) return;
          convs = convs.filter((x) => x !== c);
          void db.delete(c.id);
          if (cur === c) select(null);
          else renderList();
        });
        row.append(open, del);
        return row;
      }),
  );
}

function select(c: Conversation | null): void {
  if (running) stop();
  cur = c;
  editing = null;
  if (c?.model) picker.select(c.model);
  showSettings();
  renderList();
  renderMessages();
  app.classList.remove("side-open");
}

// ---- messages
const actions: MessageActions = {
  edit(m) {
    editing = m.id;
    renderMessages();
  },
  regenerate(m) {
    if (!cur || running) return;
    void answer(cur, m.parent);
  },
  switchSibling(m, delta) {
    if (!cur || running) return;
    const sibs = siblings(cur, m.parent);
    const next = sibs[sibs.indexOf(m) + delta];
    if (!next) return;
    cur.leaf = deepest(cur, next.id);
    void save(cur);
    renderMessages();
  },
  position(m) {
    const sibs = cur ? siblings(cur, m.parent) : [m];
    return [sibs.indexOf(m) + 1, sibs.length];
  },
  streaming: (m) => running?.id === m.id,
};

function renderMessages(): void {
  const path = cur ? branch(cur) : [];
  if (!path.length) {
    const empty = document.createElement("div");
    empty.className = "empty";
    empty.textContent = "Pick a model and send a message.";
    messagesEl.replaceChildren(empty);
    return;
  }
  messagesEl.replaceChildren(
    ...path.map((m) =>
      m.id === editing
        ? editView(
            m,
            (text) => void resend(m, text),
            () => ((editing = null), renderMessages()),
          )
        : messageView(m, actions),
    ),
  );
  messagesEl.scrollTop = messagesEl.scrollHeight;
}

/** Re-renders one message in place, keeping its collapsible blocks open or shut as they were. */
function refresh(m: Message): void {
  const old = messagesEl.querySelector<HTMLElement>(`[data-id="${m.id}"]`);
  if (!old) return renderMessages();
  const open = new Set([...old.querySelectorAll<HTMLDetailsElement>("details[open]")].map((d) => d.dataset.key));
  const view = messageView(m, actions);
  for (const d of view.querySelectorAll<HTMLDetailsElement>("details")) d.open = open.has(d.dataset.key);
  const atBottom = messagesEl.scrollHeight - messagesEl.scrollTop - messagesEl.clientHeight < 40;
  old.replaceWith(view);
  if (atBottom) messagesEl.scrollTop = messagesEl.scrollHeight;
}

/** Adds an assistant message under `parent` and streams its answer. */
async function answer(c: Conversation, parent: string | null): Promise<void> {
  if (!c.model) c.model = picker.value();
  const m: Message = { id: newId(), parent, role: "assistant", content: "", model: c.model };
  c.messages[m.id] = m;
  c.leaf = m.id;
  const ctrl = new AbortController();
  running = { ctrl, id: m.id };
  setRunning(true);
  await save(c);
  renderMessages();
  let frame = 0;
  await generate(c, m, ctrl.signal, () => {
    // One render per frame, however many deltas arrived.
    frame ||= requestAnimationFrame(() => ((frame = 0), cur === c && refresh(m)));
  });
  cancelAnimationFrame(frame);
  running = null;
  setRunning(false);
  if (cur === c) refresh(m);
  // The model may have just been loaded (or unloaded): mark the picker anew.
  picker.refresh().catch(() => undefined);
  if (m.error?.startsWith("Wrong API key") || m.error?.startsWith("This server needs an API key")) askKey(m.error);
  await save(c);
}

function setRunning(on: boolean): void {
  $("send").hidden = on;
  $("stop").hidden = !on;
  document.body.dataset.state = on ? "streaming" : "idle";
}

function stop(): void {
  running?.ctrl.abort();
}

async function send(): Promise<void> {
  const text = input.value.trim();
  if ((!text && !attached.length) || running) return;
  const c = ensureConversation();
  c.model = picker.value() || c.model;
  if (!c.model) return showBanner("No model to send to: pull one first (side panel).");
  const m: Message = { id: newId(), parent: c.leaf, role: "user", content: text, ...(attached.length ? { images: attached } : {}) };
  if (!c.leaf) c.title = (text || "Image").slice(0, 60);
  c.messages[m.id] = m;
  c.leaf = m.id;
  input.value = "";
  autosize();
  attached = [];
  renderAttachments();
  await answer(c, m.id);
}

async function resend(m: Message, text: string): Promise<void> {
  if (!cur || running) return;
  editing = null;
  const copy: Message = { ...m, id: newId(), content: text };
  cur.messages[copy.id] = copy;
  cur.leaf = copy.id;
  await answer(cur, copy.id);
}

// ---- composer
function autosize(): void {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight + 2, 200)}px`;
}
input.addEventListener("input", autosize);
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    void send();
  }
});
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && running) {
    e.preventDefault();
    stop();
  }
});
$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  void send();
});
$("stop").addEventListener("click", stop);
$("new-chat").addEventListener("click", () => {
  select(null);
  input.focus();
});
$("open-side").addEventListener("click", () => app.classList.add("side-open"));
$("close-side").addEventListener("click", () => app.classList.remove("side-open"));

// ---- images
function renderAttachments(): void {
  $("attachments").replaceChildren(
    ...attached.map((src, i) => {
      const chip = document.createElement("div");
      chip.className = "chip";
      const img = document.createElement("img");
      img.src = src;
      img.alt = `attachment ${i + 1}`;
      const rm = document.createElement("button");
      rm.type = "button";
      rm.textContent = "✕";
      rm.title = "Remove";
      rm.addEventListener("click", () => {
        attached.splice(i, 1);
        renderAttachments();
      });
      chip.append(img, rm);
      return chip;
    }),
  );
}
async function attach(files: Iterable<File>): Promise<void> {
  for (const f of files) {
    if (!f.type.startsWith("image/")) {
      showBanner(`${f.name} is not an image (${f.type || "unknown type"}).`);
      continue;
    }
    const url = await new Promise<string>((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => resolve(r.result as string);
      r.onerror = () => reject(r.error ?? new Error(`cannot read ${f.name}`));
      r.readAsDataURL(f);
    });
    attached.push(url);
  }
  renderAttachments();
}
const fileInput = $<HTMLInputElement>("file");
fileInput.addEventListener("change", () => {
  void attach(fileInput.files ?? []).then(() => (fileInput.value = ""));
});
input.addEventListener("paste", (e) => {
  const files = [...(e.clipboardData?.files ?? [])];
  if (files.length) {
    e.preventDefault();
    void attach(files);
  }
});
const composer = $("composer");
composer.addEventListener("dragover", (e) => {
  e.preventDefault();
  composer.classList.add("drop");
});
composer.addEventListener("dragleave", () => composer.classList.remove("drop"));
composer.addEventListener("drop", (e) => {
  e.preventDefault();
  composer.classList.remove("drop");
  void attach(e.dataTransfer?.files ?? []);
});

// ---- start
async function start(): Promise<void> {
  setRunning(false);
  renderMessages();
  try {
    convs = await db.all();
  } catch (err) {
    showBanner(`Conversations cannot be kept in this browser (IndexedDB: ${(err as Error).message}).`);
  }
  renderList();
  await refreshModels();
  document.body.dataset.ready = "true";
}
void start();
