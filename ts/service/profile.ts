/**
 * What a store model's Modelfile adds to the GGUF, applied the way Ollama applies it:
 *
 * - PARAMETERs are the model's sampling defaults: the API's own defaults < the Modelfile's <
 *   the request's (`options` on /api, the OpenAI fields on /v1);
 * - SYSTEM is the system message when the request brings none; MESSAGEs go before the
 *   request's messages (not when /api/generate continues a `context`);
 * - TEMPLATE (a Go template) replaces the GGUF's Jinja template for this model.
 */
import type { ChatMessage } from "../schemas/chat.ts";
import type { SamplingRequest } from "../schemas/sampling.ts";
import { GoTemplate, type ModelConfig, type ResolvedModel } from "../store/index.ts";
import { RequestError } from "./errors.ts";
import { ollamaSamplingRequest } from "./sampling.ts";

export type RequestTemplate = GoTemplate;

/** /api/generate's `template`: a Go template for one request; one that does not parse is a 400 naming the field. */
export function requestTemplate(source: string | null | undefined): RequestTemplate | undefined {
  if (!source) return undefined;
  try {
    return GoTemplate.parse(source);
  } catch (err) {
    throw new RequestError("INVALID_REQUEST", `Invalid template: ${(err as Error).message}`, "template", "invalid_template");
  }
}

export interface ModelProfile {
  /** Modelfile PARAMETERs under Ollama's option names (`stop` an array). */
  params: Record<string, unknown>;
  /**
   * The GGUF's own sampling defaults (`general.sampling.*`, what converters take from
   * generation_config.json) under Ollama's option names: below the PARAMETERs, on the OpenAI-shaped
   * routes only — llama-server and vLLM apply a model's defaults; Ollama's /api does not.
   */
  modelDefaults?: Record<string, number>;
  system?: string;
  messages: { role: string; content: string }[];
  /** The Modelfile TEMPLATE, parsed. */
  goTemplate?: GoTemplate;
  /** Set for models that come from the store. */
  store?: StoreFacts;
}

export interface StoreFacts {
  /** Display name, e.g. `smol:latest`. */
  name: string;
  /** Manifest digest, sha256:<hex>. */
  digest: string;
  /** Bytes of all layers. */
  size: number;
  modifiedAt: Date;
  config?: ModelConfig;
  license?: string[];
  template?: string;
  /** The model's LoRA adapter files (its ADAPTER layers), loaded with it at scale 1. */
  adapters: string[];
}

export const EMPTY_PROFILE: ModelProfile = { params: {}, messages: [] };

/** A resolved store model's profile; a TEMPLATE that does not parse throws INVALID_TEMPLATE. */
export function profileOf(r: ResolvedModel): ModelProfile {
  return {
    params: r.params,
    system: r.system,
    messages: r.messages,
    goTemplate: r.template === undefined ? undefined : GoTemplate.parse(r.template),
    store: { name: r.name, digest: r.digest, size: r.size, modifiedAt: r.modifiedAt, config: r.config, license: r.license, template: r.template, adapters: r.adapterPaths },
  };
}

/** The Modelfile's MESSAGEs, then the request's; its SYSTEM first when the request has no system message. */
export function withProfileMessages(profile: ModelProfile | undefined, messages: ChatMessage[], opts: { withMessages?: boolean } = {}): ChatMessage[] {
  if (!profile) return messages;
  const preset = opts.withMessages === false ? [] : (profile.messages as ChatMessage[]);
  const out = [...preset, ...messages];
  const hasSystem = out.some((m) => m.role === "system" || m.role === "developer");
  return profile.system && !hasSystem ? [{ role: "system", content: profile.system }, ...out] : out;
}

/** An OpenAI-shaped request with the Modelfile's PARAMETERs filling the fields it did not set. */
export function withOpenAIDefaults<R extends SamplingRequest>(profile: ModelProfile | undefined, req: R): R {
  if (!profile) return req;
  const out: Record<string, unknown> = { ...req };
  // The PARAMETERs over the GGUF's defaults, as request fields (Ollama option names → OpenAI's: the table in sampling.ts).
  const { max_tokens: numPredict, ...params } = ollamaSamplingRequest({ ...profile.modelDefaults, ...profile.params });
  for (const [field, value] of Object.entries(params)) if (out[field] == null) out[field] = value;
  // A PARAMETER repetition penalty must not outrank the request's own spelling of it.
  if (req.repetition_penalty != null) delete out.repeat_penalty;
  if (numPredict != null && out.max_tokens == null && (out as { max_completion_tokens?: unknown }).max_completion_tokens == null) out.max_tokens = numPredict;
  return out as R;
}

/** The `general.sampling.<key>`s Wick applies (`ModelInfo.sampling` holds them without the prefix) → Ollama's option names. */
const GGUF_SAMPLING_KEYS = {
  temp: "temperature",
  top_k: "top_k",
  top_p: "top_p",
  min_p: "min_p",
  penalty_repeat: "repeat_penalty",
  penalty_last_n: "repeat_last_n",
} as const;

/** A model's sampling defaults (`ModelProfile.modelDefaults`) from its file's `general.sampling.*` (`ModelInfo.sampling`). */
export function ggufSamplingDefaults(sampling: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, option] of Object.entries(GGUF_SAMPLING_KEYS)) {
    const v = sampling[key];
    if (Number.isFinite(v)) out[option] = v;
  }
  return out;
}
