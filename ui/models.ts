/**
 * The model picker (the store's models from /api/tags, the loaded ones marked from /api/ps)
 * and pulling a hub reference through /api/pull's NDJSON progress into a progress bar.
 */
import { getJson, ndjson, request, type TagModel } from "./api.ts";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

export interface Picker {
  /** Reloads the list; rejects with the API's error (401 included). */
  refresh(): Promise<void>;
  value(): string;
  select(name: string): void;
}

function gib(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(1)} GB` : `${Math.round(bytes / 1e6)} MB`;
}

export function modelPicker(onChange: (name: string) => void): Picker {
  const select = $<HTMLSelectElement>("model");
  let wanted = localStorage.getItem("wick.model") ?? "";
  select.addEventListener("change", () => {
    wanted = select.value;
    localStorage.setItem("wick.model", wanted);
    onChange(wanted);
  });
  const picker: Picker = {
    async refresh() {
      const [tags, ps] = await Promise.all([getJson<{ models: TagModel[] }>("/api/tags"), getJson<{ models: { name: string }[] }>("/api/ps")]);
      const loaded = new Set(ps.models.map((m) => m.name));
      select.replaceChildren();
      if (!tags.models.length) {
        const o = new Option("No models: pull one from the hub (side panel)", "");
        o.disabled = true;
        select.append(o);
      }
      for (const m of tags.models) {
        const d = m.details ?? {};
        const info = [d.parameter_size, d.quantization_level, m.size ? gib(m.size) : ""].filter(Boolean).join(", ");
        const isLoaded = loaded.has(m.name) || loaded.has(`${m.name}:latest`);
        const o = new Option(`${isLoaded ? "● " : ""}${m.name}${info ? ` (${info})` : ""}${isLoaded ? " — loaded" : ""}`, m.name);
        o.dataset.loaded = String(isLoaded);
        select.append(o);
      }
      const names = tags.models.map((m) => m.name);
      const first = tags.models.find((m) => loaded.has(m.name))?.name ?? names[0] ?? "";
      select.value = names.includes(wanted) ? wanted : first;
    },
    value: () => select.value,
    select(name) {
      wanted = name;
      if ([...select.options].some((o) => o.value === name)) select.value = name;
    },
  };
  return picker;
}

/** Wires the pull form: progress per layer, the status line, the picker refreshed on success. */
export function pullForm(picker: Picker, onPulled: (name: string) => void): void {
  const form = $<HTMLFormElement>("pull-form");
  const input = $<HTMLInputElement>("pull-ref");
  const bar = $<HTMLProgressElement>("pull-progress");
  const status = $<HTMLDivElement>("pull-status");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const ref = input.value.trim();
    if (!ref) return;
    const button = form.querySelector("button")!;
    button.disabled = true;
    bar.hidden = false;
    bar.removeAttribute("value"); // indeterminate until a layer reports its size
    status.className = "muted";
    status.textContent = "pulling manifest";
    void (async () => {
      try {
        const res = await request("POST", "/api/pull", { model: ref, stream: true });
        let name = ref;
        for await (const p of ndjson(res)) {
          const total = Number(p.total ?? 0);
          const done = Number(p.completed ?? 0);
          if (total > 0) {
            bar.max = total;
            bar.value = done;
          }
          status.textContent = `${String(p.status)}${total > 0 ? ` ${Math.floor((100 * done) / total)}% of ${gib(total)}` : ""}`;
          if (typeof p.model === "string") name = p.model;
        }
        bar.max = 1;
        bar.value = 1;
        status.textContent = "listing models";
        await picker.refresh();
        // The store names a hub pull hf.co/<org>/<repo>:<quant>; pick what the list has.
        const sel = document.getElementById("model") as HTMLSelectElement;
        const match = [...sel.options].find(
          (o) =>
            o.value === name ||
            o.value.toLowerCase().includes(
              ref
                .replace(/^hf\.co\//, "")
                .split(":")[0]
                .toLowerCase(),
            ),
        );
        if (match) {
          picker.select(match.value);
          onPulled(match.value);
        }
        status.textContent = `pulled ${ref}`;
      } catch (err) {
        bar.hidden = true;
        status.className = "error";
        status.textContent = (err as Error).message;
      } finally {
        button.disabled = false;
      }
    })();
  });
}
