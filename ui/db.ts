/**
 * Conversations kept in the browser's IndexedDB (one object store, one record per
 * conversation). A conversation is a tree of messages: editing a past message or regenerating
 * an answer adds a sibling, and `leaf` says which branch is shown.
 */

export interface Settings {
  temperature: number | null;
  top_p: number | null;
  max_tokens: number | null;
  seed: number | null;
  /** OpenAI `tools` as JSON text ("" = none). */
  tools: string;
}

export interface Usage {
  prompt: number;
  completion: number;
  /** Generated tokens per second, first token to last. */
  tps: number | null;
  /** Seconds from sending to the first token. */
  ttft?: number | null;
}

export interface ToolCall {
  id?: string;
  name: string;
  arguments: string;
}

export interface Message {
  id: string;
  parent: string | null;
  role: "user" | "assistant";
  content: string;
  /** data: URLs of attached images (user messages). */
  images?: string[];
  reasoning?: string;
  toolCalls?: ToolCall[];
  usage?: Usage;
  error?: string;
  /** Stopped by the user before the end. */
  stopped?: boolean;
  model?: string;
}

export interface Conversation {
  id: string;
  title: string;
  model: string;
  system: string;
  settings: Settings;
  messages: Record<string, Message>;
  /** The last message of the branch shown. */
  leaf: string | null;
  updated: number;
}

export const DEFAULT_SETTINGS: Settings = { temperature: null, top_p: null, max_tokens: null, seed: null, tools: "" };

const DB = "wick-chat";
const STORE = "conversations";

let opened: Promise<IDBDatabase> | null = null;

function open(): Promise<IDBDatabase> {
  opened ??= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "id" });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error ?? new Error("IndexedDB open failed"));
  });
  return opened;
}

async function tx<T>(mode: IDBTransactionMode, fn: (s: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  const db = await open();
  return new Promise((resolve, reject) => {
    const req = fn(db.transaction(STORE, mode).objectStore(STORE));
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error ?? new Error("IndexedDB request failed"));
  });
}

export const db = {
  all: async (): Promise<Conversation[]> => (await tx("readonly", (s) => s.getAll() as IDBRequest<Conversation[]>)).sort((a, b) => b.updated - a.updated),
  put: (c: Conversation): Promise<IDBValidKey> => tx("readwrite", (s) => s.put(c)),
  delete: (id: string): Promise<undefined> => tx("readwrite", (s) => s.delete(id)),
};

// crypto.randomUUID needs a secure context: a LAN address over http is not one.
export const newId = (): string => (globalThis.isSecureContext ? crypto.randomUUID() : `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`);

/** The messages from the root to `leaf`. */
export function branch(c: Conversation, leaf = c.leaf): Message[] {
  const out: Message[] = [];
  for (let id = leaf; id; id = c.messages[id]?.parent ?? null) out.unshift(c.messages[id]);
  return out;
}

/** The children of `parent`, oldest first (ids are added in order). */
export function siblings(c: Conversation, parent: string | null): Message[] {
  return Object.values(c.messages).filter((m) => m.parent === parent);
}

/** The deepest leaf under `id`, following the newest child at each step. */
export function deepest(c: Conversation, id: string): string {
  for (;;) {
    const kids = siblings(c, id);
    if (!kids.length) return id;
    id = kids[kids.length - 1].id;
  }
}
