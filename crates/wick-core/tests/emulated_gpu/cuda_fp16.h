// The emulated GPU's half type (emu.hpp): the host compiler's IEEE binary16, converted from
// f32 rounding to nearest even as __float2half does.
#pragma once

typedef _Float16 __half;

static inline float __half2float(__half h) { return (float)h; }
static inline __half __float2half(float f) { return (__half)f; }
