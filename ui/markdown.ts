/**
 * A small Markdown renderer that builds DOM nodes (never innerHTML): model text only ever
 * becomes Text nodes, so no markup in an answer can run. Covers what chat answers use:
 * fenced code blocks (with a copy button; an unclosed fence while streaming is code to the
 * end), headings, paragraphs, bullet and numbered lists, block quotes, rules, and inline
 * `code`, **bold**, *italic*, ~~strike~~ and [links](https://…) (http(s) only, opened in a new tab).
 */

type Inline = (string | Node)[];

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, children: Inline = []): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  e.append(...children);
  return e;
}

const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+?)\*\*|__([^_]+?)__|\*([^*\s][^*]*?)\*|(?<![\w])_([^_\s][^_]*?)_(?![\w])|~~([^~]+?)~~|\[([^\]]+)\]\(([^)\s]+)\)/g;

export function inline(text: string): Inline {
  const out: Inline = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[2] !== undefined) out.push(el("code", undefined, [m[2].trim() ? m[2].replace(/^ (.*) $/, "$1") : m[2]]));
    else if (m[3] !== undefined || m[4] !== undefined) out.push(el("strong", undefined, inline(m[3] ?? m[4])));
    else if (m[5] !== undefined || m[6] !== undefined) out.push(el("em", undefined, inline(m[5] ?? m[6])));
    else if (m[7] !== undefined) out.push(el("del", undefined, inline(m[7])));
    else if (m[8] !== undefined) {
      const href = m[9];
      if (/^https?:\/\//i.test(href)) {
        const a = el("a", undefined, inline(m[8]));
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener noreferrer";
        out.push(a);
      } else out.push(m[0]);
    }
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

/** A code block with its language label and a copy button. */
function codeBlock(code: string, lang: string): HTMLElement {
  const wrap = el("div", "code");
  const bar = el("div", "code-bar", [el("span", "code-lang", [lang || "text"])]);
  const copy = el("button", "copy", ["Copy"]);
  copy.type = "button";
  copy.title = "Copy code";
  copy.addEventListener("click", () => {
    void copyText(code).then((ok) => {
      copy.textContent = ok ? "Copied" : "Copy failed";
      setTimeout(() => (copy.textContent = "Copy"), 1500);
    });
  });
  bar.append(copy);
  const pre = el("pre", undefined, [el("code", undefined, [code])]);
  wrap.append(bar, pre);
  return wrap;
}

/** navigator.clipboard needs a secure context (127.0.0.1 is one; a LAN address is not): fall back to execCommand. */
export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const ta = el("textarea");
    ta.value = text;
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand("copy");
    ta.remove();
    return ok;
  }
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^\s*>\s?(.*)$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;

/** Renders `md` into a fragment of block elements. */
export function render(md: string): DocumentFragment {
  const frag = document.createDocumentFragment();
  const lines = md.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  const para: string[] = [];
  const flush = () => {
    if (para.length) frag.append(el("p", undefined, withBreaks(para.splice(0))));
  };
  while (i < lines.length) {
    const line = lines[i];
    let m: RegExpExecArray | null;
    if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const body: string[] = [];
      i++;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence)) body.push(lines[i++]);
      i++; // the closing fence (or past the end while streaming)
      frag.append(codeBlock(body.join("\n"), m[2]));
      continue;
    }
    if (!line.trim()) {
      flush();
      i++;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      flush();
      frag.append(el(`h${Math.min(m[1].length + 2, 6)}` as "h3", undefined, inline(m[2])));
      i++;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      frag.append(el("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const body: string[] = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      frag.append(el("blockquote", undefined, [render(body.join("\n"))]));
      continue;
    }
    const bullet = BULLET.exec(line);
    const numbered = NUMBERED.exec(line);
    if (bullet || numbered) {
      flush();
      const re = bullet ? BULLET : NUMBERED;
      const list = bullet ? el("ul") : el("ol");
      if (numbered && numbered[1] !== "1") (list as HTMLOListElement).start = Number(numbered[1]);
      while (i < lines.length && (m = re.exec(lines[i]))) {
        const item: string[] = [bullet ? m[1] : m[2]];
        i++;
        // Indented continuation lines belong to the item.
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !BULLET.test(lines[i]) && !NUMBERED.test(lines[i])) item.push(lines[i++].trim());
        list.append(el("li", undefined, withBreaks(item)));
      }
      frag.append(list);
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
  return frag;
}

function withBreaks(ls: string[]): Inline {
  const out: Inline = [];
  ls.forEach((l, k) => {
    if (k) out.push(el("br"));
    out.push(...inline(l));
  });
  return out;
}
