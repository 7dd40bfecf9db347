#!/usr/bin/env python3
"""Checks a GGUF written by `wick convert` against llama.cpp's own converter code, run here on
the same Hugging Face directory: gguf-py (llama.cpp's `gguf-py/`, which convert_hf_to_gguf.py
uses) maps every checkpoint tensor name (`TensorNameMap`), reads the special tokens, merges,
add-BOS/EOS flags and chat template (`SpecialVocab`), derives the general.* names and size
label (`Metadata.load`), and names every metadata key (`Keys`). The converter script itself
needs torch and transformers, which this project does not install; its per-model code
(conversion/*.py) is what the Rust tests' tables follow.

    python3 scripts/check-convert.py <hf_dir> <file.gguf> [llama.cpp source dir]

Needs numpy and pyyaml (scripts/py-venv.sh). Prints one line per difference; exits 1 if any.
"""
import json
import re
import struct
import sys
from pathlib import Path

hf_dir, gguf_path = Path(sys.argv[1]), Path(sys.argv[2])
llama_src = Path(sys.argv[3] if len(sys.argv) > 3 else Path(__file__).resolve().parent.parent / ".cache/llama.cpp")
sys.path.insert(0, str(llama_src / "gguf-py"))
import gguf  # noqa: E402
from gguf.constants import Keys  # noqa: E402

problems: list[str] = []
reader = gguf.GGUFReader(gguf_path)
fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def value(key):
    f = fields.get(key)
    if f is None:
        return None
    v = f.contents()
    return v


arch = value("general.architecture")
config = json.loads((hf_dir / "config.json").read_text())
hf_arch = config["architectures"][0]

# --- tensor names (TensorNameMap), as the model classes rename and stack them
n_layer = config["num_hidden_layers"]
tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], n_layer)


def safetensors_names(d: Path) -> dict[str, list[int]]:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k != "__metadata__":
                out[k] = v["shape"]
    return out


expected: dict[str, list[int]] = {}
experts: dict[tuple[int, str], int] = {}
for name, shape in safetensors_names(hf_dir).items():
    if arch == "lfm2moe":
        if name.endswith(".expert_bias"):
            name = name.replace(".expert_bias", ".expert_bias.bias")
        m = re.match(r"model\.layers\.(\d+)\.feed_forward\.experts\.(\d+)\.(w[123])\.weight", name)
        if m:
            key = (int(m.group(1)), m.group(3))
            experts[key] = experts.get(key, 0) + 1
            merged = f"layers.{m.group(1)}.feed_forward.experts.{m.group(3)}.weight"
            new = tmap.get_name(merged, try_suffixes=(".weight",))
            if new is None:
                problems.append(f"gguf-py cannot map {merged}")
            else:
                expected[new] = [experts[key]] + shape
            continue
    new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    if new is None:
        problems.append(f"gguf-py cannot map {name}")
        continue
    if "conv.conv" in name:
        shape = [shape[0], shape[2]]
    if arch == "gemma3" and new == "token_embd.weight":
        shape = [len(value("tokenizer.ggml.tokens")), shape[1]]
    expected[new] = shape
got = {t.name: list(reversed([int(x) for x in t.shape])) for t in reader.tensors}
for name in sorted(set(expected) | set(got)):
    if name == "rope_freqs.weight" and name in got:
        continue
    if name not in got:
        problems.append(f"tensor {name} missing")
    elif name not in expected:
        problems.append(f"tensor {name} not written by llama.cpp's converter")
    elif got[name] != expected[name]:
        problems.append(f"tensor {name}: shape {got[name]} != {expected[name]}")

# --- special vocabulary (SpecialVocab)
spm = value("tokenizer.ggml.model") == "llama"
n_tokens = len(fields["tokenizer.ggml.tokens"].data)
sv = gguf.SpecialVocab(hf_dir, load_merges=not spm, n_vocab=n_tokens if spm else None)
if not spm and list(value("tokenizer.ggml.merges") or []) != sv.merges:
    problems.append(f"merges differ ({len(value('tokenizer.ggml.merges') or [])} vs {len(sv.merges)})")
names = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
         "pad": "padding_token_id", "mask": "mask_token_id", "eot": "eot_token_id", "eom": "eom_token_id"}
for typ, key in names.items():
    want = sv.special_token_ids.get(typ)
    have = value(f"tokenizer.ggml.{key}")
    if want != have:
        problems.append(f"tokenizer.ggml.{key}: {have} != {want}")
for typ in ("bos", "eos", "sep"):
    want = sv.add_special_token.get(typ)
    have = value(f"tokenizer.ggml.add_{typ}_token")
    if arch == "llama" and typ == "bos" and config.get("vocab_size") == 49152:
        want = False
    if want != have:
        problems.append(f"tokenizer.ggml.add_{typ}_token: {have} != {want}")
if sv.chat_template != value("tokenizer.chat_template"):
    problems.append("tokenizer.chat_template differs")

# --- general.* (Metadata.load, without a model card)
total = sum(int(t.n_elements) for t in reader.tensors)
shared = expert = n_expert_tensors = expert_sum = 0
for t in reader.tensors:
    shape = list(reversed([int(x) for x in t.shape]))
    if "_exps." in t.name and len(shape) >= 3:
        count = shape[-2 if ".bias" in t.name else -3]
        expert += int(t.n_elements) // count
        expert_sum += count
        n_expert_tensors += 1
    else:
        shared += int(t.n_elements)
expert_count = expert_sum // n_expert_tensors if n_expert_tensors else 0
meta = gguf.Metadata.load(None, hf_dir, None, total)
if meta.name is None:
    meta.name = hf_dir.name
if meta.size_label is None and total > 0:
    meta.size_label = gguf.size_label(total, shared, expert, expert_count)
for attr, key in [("name", "name"), ("organization", "organization"), ("basename", "basename"), ("finetune", "finetune"),
                  ("version", "version"), ("size_label", "size_label")]:
    if getattr(meta, attr) != value(f"general.{key}"):
        problems.append(f"general.{key}: {value(f'general.{key}')!r} != {getattr(meta, attr)!r}")
for attr, key in [("sampling_top_k", "top_k"), ("sampling_top_p", "top_p"), ("sampling_temp", "temp"),
                  ("sampling_penalty_repeat", "penalty_repeat"), ("sampling_min_p", "min_p")]:
    want, have = getattr(meta, attr), value(f"general.sampling.{key}")
    if (want is None) != (have is None) or (want is not None and abs(float(want) - float(have)) > 1e-6):
        problems.append(f"general.sampling.{key}: {have} != {want}")

# --- every key is one gguf-py knows
known = set()
for group in vars(Keys).values():
    if isinstance(group, type):
        for v in vars(group).values():
            if isinstance(v, str):
                known.add(v.replace("{arch}", arch))
for k in fields:
    if k not in known:
        problems.append(f"key {k} is not one of gguf-py's Keys")

for p in problems:
    print(p)
print(f"{gguf_path.name}: {len(got)} tensors, {len(fields)} keys, {len(problems)} differences from gguf-py")
sys.exit(1 if problems else 0)
