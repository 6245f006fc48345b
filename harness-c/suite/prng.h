// prng.h — the suite's deterministic data generator (a 32-bit SplitMix-style
// generator). Integer-only, so both targets produce the same bytes.
#ifndef MEMTRACE_PRNG_H
#define MEMTRACE_PRNG_H

#include <stdint.h>

namespace memtrace {

class Prng {
  public:
    explicit Prng(uint32_t seed) : state_(seed * 0x9E3779B9u + 0x6A09E667u) {}

    uint32_t next() {
        state_ += 0x9E3779B9u;
        uint32_t z = state_;
        z = (z ^ (z >> 16)) * 0x85EBCA6Bu;
        z = (z ^ (z >> 13)) * 0xC2B2AE35u;
        return z ^ (z >> 16);
    }

    // Uniform in [-scale, scale), with 24 random bits: the integer to float
    // conversion and the power-of-two scaling are exact on both targets.
    float uniform(float scale) {
        return static_cast<float>(static_cast<int32_t>(next()) >> 8) * (scale / 8388608.0f);
    }

    int8_t int8() { return static_cast<int8_t>(next() >> 24); }

    // Symmetric int8 weights, as TFLite's int8 quantisation produces them.
    int8_t int8_symmetric() {
        int8_t v = int8();
        return v == -128 ? -127 : v;
    }

    // Uniform in [lo, hi] (hi - lo < 2^16).
    int32_t range(int32_t lo, int32_t hi) {
        return lo + static_cast<int32_t>((next() >> 16) % static_cast<uint32_t>(hi - lo + 1));
    }

  private:
    uint32_t state_;
};

}  // namespace memtrace

#endif  // MEMTRACE_PRNG_H
