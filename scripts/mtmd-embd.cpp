// llama.cpp's LFM2-VL prompt chunks for `<|im_start|>user\n<image>Hi` and one raw RGB image
// (w·h·3 bytes): text chunks as token ids (`T n ids…`), image chunks as their projected
// embeddings (`E n n_embd values…`, from mtmd_encode_chunk), one line each, in prompt order;
// each encode's time goes to stderr (`ENCODE n tokens t ms`). The reference of
// crates/wick-core/tests/vision.rs and benches/vision.rs; built by scripts/build-mtmd-embd.sh.
// Flash attention off, as the parity tests run llama.cpp; THREADS (default 2) encoder threads;
// DUMP=1 also prints every intermediate tensor of the encoder graph (first values and a sum)
// to stderr, for finding where two implementations part.
//
// usage: wick-mtmd-embd <text-model.gguf> <mmproj.gguf> <image.rgb> <w> <h> <out.txt> [max_tokens]
#include "llama.h"
#include "mtmd.h"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include "ggml.h"
#include "ggml-backend.h"
static bool dump_cb(struct ggml_tensor * t, bool ask, void *) {
    if (ask) return getenv("DUMP") != nullptr;
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) { fprintf(stderr, "TENSOR %s %s skip\n", t->name, ggml_op_desc(t)); return true; }
    std::vector<float> v(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
    fprintf(stderr, "TENSOR %s %s [%lld %lld %lld]", t->name, ggml_op_desc(t), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2]);
    for (int i = 0; i < 4 && i < (int)v.size(); i++) fprintf(stderr, " %.9g", v[i]);
    double sum = 0; for (float x : v) sum += (double)x * 1.000001;
    fprintf(stderr, " sum %.12g\n", sum);
    return true;
}
int main(int argc, char ** argv) {
    if (argc < 7) return 2;
    int w = atoi(argv[4]), h = atoi(argv[5]);
    std::vector<unsigned char> rgb((size_t) w * h * 3);
    FILE * f = fopen(argv[3], "rb"); if (!f || fread(rgb.data(), 1, rgb.size(), f) != rgb.size()) return 3; fclose(f);
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    auto cp = mtmd_context_params_default();
    cp.use_gpu = false; cp.n_threads = getenv("THREADS") ? atoi(getenv("THREADS")) : 2; cp.print_timings = false; cp.warmup = false;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED; cp.cb_eval = dump_cb; cp.cb_eval_user_data = nullptr;
    if (argc > 7) cp.image_max_tokens = atoi(argv[7]);
    mtmd_context * ctx = mtmd_init_from_file(argv[2], model, cp);
    if (!ctx) return 4;
    mtmd_bitmap * bm = mtmd_bitmap_init(w, h, rgb.data());
    std::string prompt = std::string("<|im_start|>user\n") + mtmd_get_marker(ctx) + "Hi";
    mtmd_input_text txt;
    txt.text = prompt.c_str();
    txt.text_len = prompt.size();
    txt.add_special = true;
    txt.parse_special = true;
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    const mtmd_bitmap * bms[1] = {bm};
    if (mtmd_tokenize(ctx, chunks, &txt, bms, 1) != 0) return 5;
    FILE * o = fopen(argv[6], "w");
    int n_embd = llama_model_n_embd(model);
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        auto c = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n; auto t = mtmd_input_chunk_get_tokens_text(c, &n);
            fprintf(o, "T %zu", n); for (size_t j = 0; j < n; j++) fprintf(o, " %d", t[j]); fprintf(o, "\n");
        } else {
            const int64_t t0 = ggml_time_us();
            if (mtmd_encode_chunk(ctx, c) != 0) return 6;
            fprintf(stderr, "ENCODE %zu tokens %.1f ms\n", mtmd_input_chunk_get_n_tokens(c), (ggml_time_us() - t0) / 1000.0);
            size_t n = mtmd_input_chunk_get_n_tokens(c);
            float * e = mtmd_get_output_embd(ctx);
            fprintf(o, "E %zu %d", n, n_embd);
            for (size_t j = 0; j < n * n_embd; j++) fprintf(o, " %.9g", e[j]);
            fprintf(o, "\n");
        }
    }
    fclose(o);
    return 0;
}
