/**
 * LoRA adapters as the APIs see them: an adapter chosen by its name as a model (vLLM's rule: the
 * base model with that adapter alone at scale 1, answering under the adapter's name), and an
 * adapter that does not fit its base reported as the request's fault (a 400 with the engine's
 * reason), not as a server error. Loading, unloading and the default scales live in the model
 * manager (models.ts), which holds the models.
 */
import { WickError, type LoraAdapter } from "../engine/index.ts";
import { RequestError } from "./errors.ts";
import type { ServedModel } from "./registry.ts";

/**
 * The base model seen through one adapter: its id is the adapter's name, and a request that names
 * no adapters (`lora`) gets that adapter alone at scale 1. Everything else is the base's.
 */
export function adapterView(base: ServedModel, adapter: LoraAdapter): ServedModel {
  const only = [{ id: adapter.id, scale: 1 }];
  return { ...base, id: adapter.name, generate: (opts, signal) => base.generate(opts.lora ? opts : { ...opts, lora: only }, signal) };
}

/**
 * A load that failed on a LoRA adapter (not a GGUF adapter, made for another architecture, shapes
 * that do not fit, a missing file) → INVALID_REQUEST with the engine's reason; other errors pass.
 */
export function loraError(err: unknown, param: string | null = null): unknown {
  if (err instanceof WickError && err.code === "MODEL_LOAD_FAILED" && /LoRA adapter/.test(err.message)) {
    return new RequestError("INVALID_REQUEST", err.message.replace(/^failed to load model: /, ""), param);
  }
  return err;
}
