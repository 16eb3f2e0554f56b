// <immintrin.h> for the units compiled with AVX-512 flags.  GCC 12's AVX-512
// headers initialise "undefined" vectors from themselves, which
// -Wuninitialized reports inside the intrinsics (GCC bug 105593); the
// warnings are off from here to the end of the including unit.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
