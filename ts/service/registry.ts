/**
 * The models this process serves, by id. Each holds its Engine, the facts routes need
 * (info, load time) and its parsed chat template. Routes resolve a request's `model` here.
 */
import path from "node:path";
import { Engine, type EngineEvent, type GenerateOptions, type LoadOptions, type ModelInfo } from "../engine/index.ts";
import { CHATML_TEMPLATE, ChatTemplate } from "./chat-template.ts";
import { RequestError } from "./errors.ts";
import { ServingMetrics } from "./metrics.ts";
import { EMPTY_PROFILE, ggufSamplingDefaults, type ModelProfile } from "./profile.ts";
import { modelReasoning, type ModelReasoning, type ReasoningMode } from "./reasoning-plan.ts";
import { detectParser, parserFor, type ToolParser } from "./tools/index.ts";

export interface ServedModel {
  id: string;
  path: string;
  engine: Engine;
  info: ModelInfo;
  /** Unix seconds, for OpenAI's `created`. */
  created: number;
  template: ChatTemplate;
  /** True when the GGUF had no template and ChatML stands in. */
  templateIsFallback: boolean;
  /** How tool calls are written in this model's output (the template's family, or forced). */
  toolParser: ToolParser;
  /** Whether and where its thinking is split from the answer (the template's markers, the server's mode). */
  reasoning: ModelReasoning;
  /** A store model's Modelfile parts (sampling defaults, SYSTEM, MESSAGEs, Go TEMPLATE). */
  profile?: ModelProfile;
  /** The engine's event stream for one sequence, observed by the serving metrics. */
  generate(opts: GenerateOptions, signal?: AbortSignal): AsyncGenerator<EngineEvent>;
}

export interface ServeOptions {
  /** Served name; default: the file name without `.gguf`. */
  id?: string;
  /** A tool-call parser by name (`--tool-call-parser`); default: detected from the template. */
  toolCallParser?: string;
  /** `--reasoning-format` / `--reasoning-parser`; default: split at the template's markers. */
  reasoning?: ReasoningMode;
  /** `--reasoning-budget`: tokens a thinking block may run; undefined: no limit. */
  reasoningBudget?: number;
  profile?: ModelProfile;
}

export interface LoadModelOptions extends Omit<LoadOptions, "vocabOnly">, ServeOptions {}

/** `/x/SmolLM2-135M-Instruct.Q4_1.gguf` → `SmolLM2-135M-Instruct.Q4_1`. */
export function modelIdFromPath(p: string): string {
  return path.basename(p).replace(/\.gguf$/i, "");
}

export class ModelRegistry {
  private readonly models = new Map<string, ServedModel>();
  readonly metrics = new ServingMetrics(this);

  async load(opts: LoadModelOptions): Promise<ServedModel> {
    const { id, toolCallParser, reasoning, reasoningBudget, profile, ...engineOpts } = opts;
    const engine = await Engine.load(engineOpts);
    try {
      return this.add(engine, { path: opts.modelPath, id, toolCallParser, reasoning, reasoningBudget, profile });
    } catch (err) {
      await engine.unload();
      throw err;
    }
  }

  /** Serves an already loaded engine (tests and the library API load their own). */
  add(engine: Engine, opts: ServeOptions & { path: string }): ServedModel {
    const id = opts.id ?? modelIdFromPath(opts.path);
    if (this.models.has(id)) throw new Error(`a model named '${id}' is already served`);
    const info = engine.info();
    const special = (tok: number | undefined) => (tok === undefined ? "" : engine.detokenize([tok]));
    const source = info.chatTemplate?.trim() ? info.chatTemplate : undefined;
    const forced = opts.toolCallParser === undefined ? undefined : parserFor(opts.toolCallParser);
    if (opts.toolCallParser !== undefined && !forced) throw new Error(`unknown tool-call parser '${opts.toolCallParser}'`);
    // A Modelfile TEMPLATE is what prompts are written with, so it also says how calls and thinking look.
    const toolSource = opts.profile?.goTemplate?.source ?? source ?? CHATML_TEMPLATE;
    // The file's own sampling defaults (general.sampling.*) sit under the profile's PARAMETERs.
    const modelDefaults = ggufSamplingDefaults(info.sampling);
    const profile = Object.keys(modelDefaults).length ? { ...(opts.profile ?? EMPTY_PROFILE), modelDefaults } : opts.profile;
    const model: ServedModel = {
      id,
      path: opts.path,
      engine,
      info,
      created: Math.floor(Date.now() / 1000),
      template: new ChatTemplate(source ?? CHATML_TEMPLATE, { bos_token: special(info.bosToken), eos_token: special(info.eosToken) }),
      templateIsFallback: source === undefined,
      toolParser: forced ?? detectParser(toolSource),
      reasoning: {
        ...modelReasoning(toolSource, opts.reasoning ?? { format: "auto" }, (t) => engine.tokenId(t) ?? undefined),
        ...(opts.reasoningBudget !== undefined ? { budget: opts.reasoningBudget } : {}),
      },
      ...(profile ? { profile } : {}),
      generate: (o, signal) => this.metrics.track(id, engine.generate(o, signal), o.holdEvents === true),
    };
    this.models.set(id, model);
    return model;
  }

  get(id: string): ServedModel | undefined {
    return this.models.get(id);
  }

  list(): ServedModel[] {
    return [...this.models.values()];
  }

  /**
   * The served model a name picks out exactly: its id, its id with Ollama's default `:latest`
   * tag, or the path it was loaded from. For lookups where `resolve`'s any-name fallback would
   * mislead (`/api/show` of an unknown name must be a 404).
   */
  find(name: string): ServedModel | undefined {
    const exact = this.models.get(name) ?? this.models.get(name.replace(/:latest$/, ""));
    if (exact) return exact;
    const wanted = path.resolve(name);
    return this.list().find((m) => path.resolve(m.path) === wanted);
  }

  /**
   * The model a request names. As llama-server does, any name is accepted while exactly one
   * model is served (clients hard-code names such as "gpt-4o"); with several, it must match.
   */
  resolve(requested: string | null | undefined): ServedModel {
    if (requested) {
      const exact = this.models.get(requested);
      if (exact) return exact;
    }
    if (this.models.size === 1) return this.models.values().next().value!;
    if (this.models.size === 0) throw new RequestError("MODEL_NOT_FOUND", "No model is loaded on this server.", "model");
    if (!requested) throw new RequestError("INVALID_REQUEST", "Missing required parameter: 'model' (this server serves several models).", "model", "missing_required_parameter");
    throw new RequestError("MODEL_NOT_FOUND", `The model '${requested}' does not exist. Served: ${[...this.models.keys()].join(", ")}.`, "model");
  }

  /** Stops serving `id` (the caller unloads its engine). */
  remove(id: string): ServedModel | undefined {
    const model = this.models.get(id);
    this.models.delete(id);
    return model;
  }

  async unloadAll(): Promise<void> {
    const all = this.list();
    this.models.clear();
    await Promise.all(all.map((m) => m.engine.unload()));
  }
}
