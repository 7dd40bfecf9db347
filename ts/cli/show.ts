/**
 * `wick show <model.gguf>`: what `ollama show` prints (architecture, parameters, context and
 * embedding length, experts, quantization) plus the quantization mix, read from the GGUF
 * header without loading weights. `--json` gives the engine's full model info.
 */
import { inspectModel } from "../engine/index.ts";
import { describeModel, modelfile, SHOW_ARRAY_LIMIT } from "../service/show.ts";
import { modelIdFromPath } from "../service/registry.ts";
import type { ShowFlags } from "./flags.ts";
import { CliError } from "./serve.ts";

export async function show(model: string, flags: ShowFlags): Promise<void> {
  let info;
  try {
    info = await inspectModel(model, { maxArrayLen: SHOW_ARRAY_LIMIT });
  } catch (err) {
    throw new CliError(`cannot read ${model}: ${(err as Error).message}`);
  }
  let out: string;
  if (flags.json) out = `${JSON.stringify(info, null, 2)}\n`;
  else if (flags.template) out = info.chatTemplate ? `${info.chatTemplate}\n` : "";
  else if (flags.modelfile) out = modelfile(modelIdFromPath(model), model);
  else out = describeModel(info);
  process.stdout.write(out);
}
