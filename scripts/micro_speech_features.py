#!/usr/bin/env python3
"""The features TFLM's micro_speech example computes from a WAV file, as
the micro_speech_quantized model's input bytes (`memtrace run MODEL
--input`), on the host with PyPI `tflite-micro` (the host oracle).

    micro_speech_features.py EXAMPLE_DIR WAV OUT.bin

EXAMPLE_DIR is TFLM's `tensorflow/lite/micro/examples/micro_speech`; WAV
a file of its `testdata/`. As the example's test does (`GenerateFeatures`
of `micro_speech_test.cc`), one interpreter of
`models/audio_preprocessor_int8.tflite` is invoked on every window of
`kFeatureDurationMs` of audio, `kFeatureStrideMs` apart, at most
`kFeatureCount` times (the constants of `micro_model_settings.h`, read
from it), keeping its state between windows; its outputs, one int8
feature vector per window, are written one after the other, then zeros
for windows the audio is too short for (the test's global feature array
starts zeroed).

Run it with the oracle's Python (`MEMTRACE_TFLM_PYTHON`, which has numpy
and tflite-micro).
"""

import re
import sys
import wave
from pathlib import Path

import numpy as np
from tflite_micro.python.tflite_micro import runtime


def settings(example):
    """The integer constants of micro_model_settings.h, by name."""
    text = (example / "micro_model_settings.h").read_text()
    found = dict(re.findall(r"constexpr int (\w+) = (\d+);", text))
    return {k: int(v) for k, v in found.items()}


def samples(path):
    """The 16-bit mono samples of a WAV file."""
    with wave.open(str(path)) as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            sys.exit(f"{path}: not 16-bit mono")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def features(example, audio):
    """The feature vectors of `audio`, as the test computes them."""
    s = settings(example)
    rate = s["kAudioSampleFrequency"]
    window = s["kFeatureDurationMs"] * rate // 1000
    stride = s["kFeatureStrideMs"] * rate // 1000
    count, size = s["kFeatureCount"], s["kFeatureSize"]
    model = example / "models" / "audio_preprocessor_int8.tflite"
    interpreter = runtime.Interpreter.from_file(str(model))
    out = np.zeros((count, size), dtype=np.int8)
    start, n = 0, 0
    while len(audio) - start >= window and n < count:
        interpreter.set_input(audio[start:start + window].reshape(1, window), 0)
        interpreter.invoke()
        out[n] = interpreter.get_output(0).reshape(size)
        start += stride
        n += 1
    return out


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    example = Path(argv[1])
    audio = samples(example / "testdata" / argv[2])
    Path(argv[3]).write_bytes(features(example, audio).tobytes())


if __name__ == "__main__":
    main(sys.argv)
