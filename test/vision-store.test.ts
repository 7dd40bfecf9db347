/**
 * A model pulled from a hub repo with an LFM2-VL `mmproj` file loads with its projector: the
 * store keeps the projector beside the model, and the model manager pairs them when the
 * projector is a kind Wick reads (`clip.projector_type = lfm2`).
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fixture, needs } from "./helpers/assets.ts";
import { startHub } from "./helpers/hub.ts";
import { ModelManager } from "../ts/service/models.ts";
import { showModel } from "../ts/service/show.ts";
import { HubClient } from "../ts/store/hub.ts";
import { ModelStore } from "../ts/store/store.ts";

const text = fixture("tiny-lfm2-vl-q8_0.gguf");
const proj = fixture("mmproj-tiny-lfm2-vl-q8_0.gguf");
const { test, path: modelPath } = needs(text, proj);

test("a pulled LFM2-VL model loads with the projector from its repo", async (t) => {
  const hub = await startHub();
  const models = new ModelManager({ store: new ModelStore({ home: mkdtempSync(path.join(os.tmpdir(), "wick-vl-")) }) });
  try {
    await hub.addRepo("wick-test/Tiny-VL-GGUF", [
      { path: "Tiny-VL-Q8_0.gguf", source: modelPath! },
      { path: "mmproj-Tiny-VL-Q8_0.gguf", source: (proj as { path: string }).path },
    ]);
    const client = new HubClient(models.store!, { endpoint: hub.url, token: "", backoffMs: 5, progressIntervalMs: 0 });
    const pulled = await client.pull("hf.co/wick-test/Tiny-VL-GGUF:Q8_0");
    t.truthy(pulled.projectorPath);
    const shown = await showModel(models, { model: "hf.co/wick-test/Tiny-VL-GGUF:Q8_0" });
    t.deepEqual(shown.capabilities, ["completion", "tools", "vision"], "vision before it is loaded, as Ollama shows it");
    const lease = await models.acquire("hf.co/wick-test/Tiny-VL-GGUF:Q8_0");
    t.true(lease.model.info.vision, "loaded with its projector");
    lease.release();
  } finally {
    await models.close();
    await hub.close();
  }
});
