/**
 * Bodies of the LoRA adapter routes: llama-server's `POST /lora-adapters` (`[{ id, scale }]`, the
 * default scales) and vLLM's `POST /v1/load_lora_adapter` (`{ lora_name, lora_path }`) and
 * `POST /v1/unload_lora_adapter` (`{ lora_name }`). Per-request `lora` is in sampling.ts.
 */
import { z } from "zod";

export const loraScales = z.array(z.object({ id: z.number().int().min(0), scale: z.number() })).max(256);

export const loadLoraAdapterRequest = z.object({
  lora_name: z.string().min(1),
  lora_path: z.string().min(1),
  /** vLLM's; the scale requests naming the base get: 0 (vLLM applies an adapter only to requests naming it). */
  load_inplace: z.boolean().nullish(),
});

export const unloadLoraAdapterRequest = z.object({
  lora_name: z.string().min(1),
  /** vLLM's optional integer id; names are what Wick goes by. */
  lora_int_id: z.number().int().nullish(),
});
