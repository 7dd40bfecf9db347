// Prints llama.cpp's LFM2-VL preprocessing plan (mtmd_image_preprocessor_lfm2, bundled
// llama.cpp v0.5.0) for a table of image sizes: overview (smart resize) size, tile grid,
// refined size. The functions are copied from tools/mtmd/mtmd-image.cpp (MIT), with
// patch 16, merge 2, image_min_pixels = 64*1024, image_max_pixels = MAXTOK*1024.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>
#include <string>
struct sz { int width, height; };
static const int patch_size = 16, n_merge = 2, tile_size = 512, min_tiles = 2, max_tiles = 10;
static const float max_pixels_tolerance = 2.0f;
static int image_min_pixels, image_max_pixels;
static sz calc_size_preserved_ratio(const sz & inp, int align_size, int min_pixels, int max_pixels) {
    const int width = inp.width, height = inp.height;
    auto round_by_factor = [f = align_size](float x) { return static_cast<int>(std::round(x / static_cast<float>(f))) * f; };
    auto ceil_by_factor  = [f = align_size](float x) { return static_cast<int>(std::ceil(x / static_cast<float>(f))) * f; };
    auto floor_by_factor = [f = align_size](float x) { return static_cast<int>(std::floor(x / static_cast<float>(f))) * f; };
    int w_bar = std::max(align_size, round_by_factor(width));
    int h_bar = std::max(align_size, round_by_factor(height));
    if (max_pixels > 0 && h_bar * w_bar > max_pixels) {
        const auto beta = std::sqrt(static_cast<float>(height) * width / max_pixels);
        h_bar = std::max(align_size, floor_by_factor(height / beta));
        w_bar = std::max(align_size, floor_by_factor(width  / beta));
    } else if (min_pixels > 0 && h_bar * w_bar < min_pixels) {
        const auto beta = std::sqrt(static_cast<float>(min_pixels) / (static_cast<float>(height) * width));
        h_bar = ceil_by_factor(height * beta);
        w_bar = ceil_by_factor(width * beta);
    }
    return {w_bar, h_bar};
}
static bool should_tile(const sz & o) {
    const int align_size = patch_size * n_merge;
    const auto round_by_factor = [align_size](float x) {
        return static_cast<int>(std::nearbyint(static_cast<double>(x) / align_size)) * align_size;
    };
    const int h_bar = std::max(patch_size, round_by_factor(o.height));
    const int w_bar = std::max(patch_size, round_by_factor(o.width));
    return static_cast<double>(h_bar) * static_cast<double>(w_bar) > static_cast<double>(image_max_pixels) * max_pixels_tolerance;
}
static std::vector<sz> get_target_ratios() {
    std::vector<sz> ratios;
    for (int n = min_tiles; n <= max_tiles; n++)
        for (int w = 1; w <= n; w++)
            for (int h = 1; h <= n; h++)
                if (w * h >= min_tiles && w * h <= max_tiles) {
                    bool found = false;
                    for (const auto & r : ratios) if (r.width == w && r.height == h) { found = true; break; }
                    if (!found) ratios.push_back({w, h});
                }
    std::sort(ratios.begin(), ratios.end(), [](const sz & a, const sz & b) { return a.width * a.height < b.width * b.height; });
    return ratios;
}
static sz find_closest_aspect_ratio(float aspect_ratio, const std::vector<sz> & target_ratios, int width, int height) {
    float best_ratio_diff = std::numeric_limits<float>::max();
    sz best_ratio = {1, 1};
    const float area = static_cast<float>(width * height);
    for (const auto & ratio : target_ratios) {
        const float target_aspect_ratio = static_cast<float>(ratio.width) / ratio.height;
        const float ratio_diff = std::abs(aspect_ratio - target_aspect_ratio);
        if (ratio_diff < best_ratio_diff) { best_ratio_diff = ratio_diff; best_ratio = ratio; }
        else if (ratio_diff == best_ratio_diff) {
            const float target_area = static_cast<float>(tile_size * tile_size * ratio.width * ratio.height);
            if (area > 0.5f * target_area) best_ratio = ratio;
        }
    }
    return best_ratio;
}
int main(int argc, char ** argv) {
    if (argc > 1 && std::string(argv[1]) == "ratios") {
        for (auto r : get_target_ratios()) printf("(%d, %d), ", r.width, r.height);
        printf("\n");
        return 0;
    }
    int max_tok = argc > 1 ? atoi(argv[1]) : 256;
    image_min_pixels = 64 * 1024; image_max_pixels = max_tok * 1024;
    int w, h;
    while (scanf("%d %d", &w, &h) == 2) {
        sz o = calc_size_preserved_ratio({w, h}, 32, image_min_pixels, image_max_pixels);
        sz g = {0, 0};
        if (should_tile({w, h})) g = find_closest_aspect_ratio((float)w / h, get_target_ratios(), w, h);
        printf("(%d, %d, %d, %d, %d, %d),\n", w, h, o.width, o.height, g.width, g.height);
    }
}
