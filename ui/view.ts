/**
 * A message's DOM: the user's text (plain, pre-wrapped) and images, or the assistant's
 * Markdown with its reasoning and tool calls in collapsible blocks, its error in place, and a
 * meta line (token counts, tokens/s, branch switcher, edit / regenerate / copy).
 */
import type { Message } from "./db.ts";
import { copyText, render } from "./markdown.ts";

export interface MessageActions {
  edit(m: Message): void;
  regenerate(m: Message): void;
  /** Shows sibling `delta` places away (-1 previous, +1 next). */
  switchSibling(m: Message, delta: -1 | 1): void;
  /** [1-based position, count] among its siblings. */
  position(m: Message): [number, number];
  streaming(m: Message): boolean;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, ...children: (string | Node)[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  e.append(...children);
  return e;
}

function button(label: string, title: string, onClick: () => void, cls = "link"): HTMLButtonElement {
  const b = el("button", cls, label);
  b.type = "button";
  b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

export function messageView(m: Message, act: MessageActions): HTMLElement {
  const live = act.streaming(m);
  const view = el("article", `msg ${m.role}`);
  view.dataset.id = m.id;
  view.dataset.role = m.role;
  if (m.role === "user") {
    if (m.images?.length) {
      const imgs = el("div", "images");
      for (const src of m.images) {
        const img = el("img", "thumb");
        img.src = src;
        img.alt = "attached image";
        imgs.append(img);
      }
      view.append(imgs);
    }
    view.append(el("div", "body", m.content));
  } else {
    if (m.reasoning) {
      const d = el("details", "reasoning-block", el("summary", undefined, live && !m.content ? "Thinking…" : "Reasoning"), el("div", "reasoning", m.reasoning));
      d.dataset.key = "reasoning";
      view.append(d);
    }
    for (const [i, call] of (m.toolCalls ?? []).entries()) {
      let args = call.arguments;
      try {
        args = JSON.stringify(JSON.parse(args), null, 2);
      } catch {
        // still streaming, or not JSON: shown as sent
      }
      const d = el("details", "tool-call", el("summary", undefined, "Tool call: ", el("code", undefined, call.name || "…")), el("pre", undefined, el("code", undefined, args)));
      d.dataset.key = `tool-${i}`;
      view.append(d);
    }
    const body = el("div", "body");
    body.append(render(m.content));
    if (live) body.classList.add("cursor");
    view.append(body);
    if (m.error) view.append(el("div", "error", m.error));
  }
  view.append(meta(m, act, live));
  return view;
}

function meta(m: Message, act: MessageActions, live: boolean): HTMLElement {
  const line = el("div", "meta");
  const [pos, count] = act.position(m);
  if (count > 1) {
    const prev = button("‹", "Previous version", () => act.switchSibling(m, -1));
    const next = button("›", "Next version", () => act.switchSibling(m, 1));
    prev.disabled = pos === 1 || live;
    next.disabled = pos === count || live;
    line.append(prev, el("span", "branch", `${pos}/${count}`), next);
  }
  if (m.role === "assistant") {
    const parts: string[] = [];
    if (m.model) parts.push(m.model);
    if (m.usage) {
      parts.push(`${m.usage.prompt} prompt + ${m.usage.completion} tokens`);
      if (m.usage.tps !== null) parts.push(`${m.usage.tps.toFixed(1)} tok/s`);
      if (m.usage.ttft != null) parts.push(`first token ${m.usage.ttft.toFixed(2)} s`);
    }
    if (m.stopped) parts.push("stopped");
    const stats = el("span", "stats", parts.join(" · "));
    line.append(stats);
    if (!live) {
      line.append(
        button("Copy", "Copy the answer", () => void copyText(m.content)),
        button("Regenerate", "Answer again (a new version)", () => act.regenerate(m)),
      );
    }
  } else if (!live) {
    line.append(button("Edit", "Edit and send again (a new branch)", () => act.edit(m)));
  }
  return line;
}

/** An inline editor for a user message; `save` gets the new text. */
export function editView(m: Message, save: (text: string) => void, cancel: () => void): HTMLElement {
  const box = el("article", "msg user edit");
  box.dataset.id = m.id;
  const ta = el("textarea");
  ta.value = m.content;
  ta.setAttribute("aria-label", "Edit message");
  const actions = el(
    "div",
    "actions",
    button("Cancel", "Keep the message as it is", cancel, ""),
    button("Save & send", "Send the edited message as a new branch", () => save(ta.value), "primary"),
  );
  ta.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      save(ta.value);
    } else if (e.key === "Escape") {
      e.stopPropagation();
      cancel();
    }
  });
  box.append(ta, actions);
  queueMicrotask(() => ta.focus());
  return box;
}
