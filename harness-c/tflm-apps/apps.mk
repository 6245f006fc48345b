# harness-c/tflm-apps/apps.mk — TFLM's own example tests, built unmodified
# for the Cortex-M4 as programs `memtrace check` runs (docs/check.md, "TFLM
# operators as layers"); included by ../Makefile:
#
#   make -C harness-c tflm-apps
#
#   build/cortex-m4/tflm-apps/person_detection_test.elf
#   build/cortex-m4/tflm-apps/person_detection_test_cmsis.elf   the same on
#                                                   TFLM's CMSIS-NN kernels
#   build/cortex-m4/tflm-apps/hello_world_test.elf
#   build/cortex-m4/tflm-apps/micro_speech_test.elf
#   build/cortex-m4/tflm-apps/person_image.bin      the person image's pixels,
#                                                   the model's input bytes
#   build/cortex-m4/tflm-apps/micro_speech/<wav>_window.bin  the first 30 ms
#                                                   (480 samples) of each test
#                                                   WAV: the audio
#                                                   preprocessor's input bytes
#
# Each is what TFLM's own build links for the test: the test source and the
# example's sources from the tests tree (TFLM_TESTS), unmodified, the arrays
# TFLM generates at build time from the models and images (here by
# ../scripts/cc_array.py, memtrace's own generator), and TFLM itself: the
# same cached libtflm.a as the TFLM runner (reference kernels, or for
# *_cmsis.elf TFLM's CMSIS-NN kernels, whose build the test's own source
# sees through -DCMSIS_NN), compiled with the same flags, so that both run
# the same kernels and allocator.
# The platform is TFLM's generic Cortex-M one (cortex_m_generic/debug_log.cc,
# from the tree, unmodified) and a board file of ours, semihosting.cc,
# which registers its log callback and gives it a clock: newlib's
# semihosting (--specs=rdimon.specs) then gives the tests printf, the heap
# and exit, and their own verdict (~~~ALL TESTS PASSED~~~, the exit status).
#
# Variables:
#   TFLM_TESTS=/path   TFLM's tests and examples (tensorflow/lite/micro/
#                      examples/, testing/); default: the sibling
#                      ../shared/third_party/tflm-tests
#   PERSON_DETECT_MODEL=/path   the example's model (TFLM's
#                      tensorflow/lite/micro/models/person_detect.tflite);
#                      default: ../shared/models/tflm_person_detect.tflite

TFLM_TESTS ?= $(abspath ../../shared/third_party/tflm-tests)
PERSON_DETECT_MODEL ?= $(abspath ../../shared/models/tflm_person_detect.tflite)
APPS := $(BUILD)/cortex-m4/tflm-apps
APPS_GEN := $(APPS)/gen
APPS_EXAMPLES := $(TFLM_TESTS)/tensorflow/lite/micro/examples
APPS_FOUND := $(and $(TFLM_TREE_FOUND),$(wildcard $(TFLM_TESTS)/tensorflow/lite/micro/testing/micro_test_v2.h))
CC_ARRAY := python3 ../scripts/cc_array.py

# TFLM's flags (tflm/tflm.mk) for every object, TFLM's and the tests' alike:
# the same TF_LITE_STATIC_MEMORY layouts on both sides of every call.
APPS_CXXFLAGS = $(ARCH.cortex-m4) $(TFLM_LIB_CXXFLAGS) $(TFLM_TREE_DEFS) $(TFLM_DEFS.reference) \
    -I$(APPS_GEN) -I$(TFLM_TESTS) $(TFLM_TREE_INCLUDES) -MMD -MP
APPS_CXXFLAGS.cmsis = $(ARCH.cortex-m4) $(TFLM_LIB_CXXFLAGS) $(TFLM_TREE_DEFS) $(TFLM_DEFS.cmsis_nn) \
    -I$(APPS_GEN) -I$(TFLM_TESTS) $(TFLM_TREE_INCLUDES) $(TFLM_INC.cmsis_nn) -MMD -MP
APPS_LIB = $(TFLM_LIBDIR.cortex-m4.reference)/libtflm.a
APPS_LIB.cmsis = $(TFLM_LIBDIR.cortex-m4.cmsis_nn)/libtflm.a
APPS_PLATFORM := $(APPS)/obj/debug_log.o $(APPS)/obj/semihosting.o

.PHONY: tflm-apps tflm-apps-note
ifneq ($(APPS_FOUND),)
tflm-apps: $(APPS)/person_detection_test.elf $(APPS)/hello_world_test.elf $(APPS)/person_image.bin \
    $(APPS)/micro_speech_test.elf micro-speech-windows \
    $(if $(TFLM_CMSIS_NN_FOUND),$(APPS)/person_detection_test_cmsis.elf)
else
tflm-apps: tflm-apps-note
endif

tflm-apps-note:
	@echo "memtrace: TFLM's tests not found at $(TFLM_TESTS) (or no TFLM tree); set TFLM_TESTS=/path/to/tflm-tests to build the TFLM example programs"

# --- generated arrays -----------------------------------------------------------
# $(1) = input file, $(2) = array name, $(3) = header path under gen/
define cc_array_rule
$(APPS_GEN)/$(3).h $(APPS_GEN)/$(3).cc &: $(1) ../scripts/cc_array.py
	$(CC_ARRAY) $(1) $(2) $(APPS_GEN)/$(3).h $(APPS_GEN)/$(3).cc
endef
PD := tensorflow/lite/micro/examples/person_detection
HW := tensorflow/lite/micro/examples/hello_world
$(eval $(call cc_array_rule,$(PERSON_DETECT_MODEL),g_person_detect_model_data,tensorflow/lite/micro/models/person_detect_model_data))
$(eval $(call cc_array_rule,$(APPS_EXAMPLES)/person_detection/testdata/person.bmp,g_person_image_data,$(PD)/testdata/person_image_data))
$(eval $(call cc_array_rule,$(APPS_EXAMPLES)/person_detection/testdata/no_person.bmp,g_no_person_image_data,$(PD)/testdata/no_person_image_data))
$(eval $(call cc_array_rule,$(APPS_EXAMPLES)/hello_world/models/hello_world_float.tflite,g_hello_world_float_model_data,$(HW)/models/hello_world_float_model_data))
$(eval $(call cc_array_rule,$(APPS_EXAMPLES)/hello_world/models/hello_world_int8.tflite,g_hello_world_int8_model_data,$(HW)/models/hello_world_int8_model_data))
# micro_speech: its two models and its six WAV files (int16 samples, as
# TFLM's generate_cc_arrays writes them for the test).
MS := tensorflow/lite/micro/examples/micro_speech
MS_MODELS := micro_speech_quantized audio_preprocessor_int8
MS_WAVS := no_1000ms yes_1000ms silence_1000ms noise_1000ms no_30ms yes_30ms
$(foreach m,$(MS_MODELS),$(eval $(call cc_array_rule,$(APPS_EXAMPLES)/micro_speech/models/$(m).tflite,g_$(m)_model_data,$(MS)/models/$(m)_model_data)))
$(foreach w,$(MS_WAVS),$(eval $(call cc_array_rule,$(APPS_EXAMPLES)/micro_speech/testdata/$(w).wav,g_$(w)_audio_data,$(MS)/testdata/$(w)_audio_data)))

# The person image's pixels as `memtrace run --input` takes them.
$(APPS)/person_image.bin: $(APPS_EXAMPLES)/person_detection/testdata/person.bmp ../scripts/cc_array.py
	@mkdir -p $(@D)
	$(CC_ARRAY) --bin $< $@

# The first window of each WAV (kFeatureDurationMs = 30 ms at 16 kHz) as the
# audio preprocessor's input for `memtrace run`.
MS_WINDOW_SAMPLES := 480
$(APPS)/micro_speech/%_window.bin: $(APPS_EXAMPLES)/micro_speech/testdata/%.wav ../scripts/cc_array.py
	@mkdir -p $(@D)
	$(CC_ARRAY) --bin $< $@ $(MS_WINDOW_SAMPLES)

PD_GENERATED := tensorflow/lite/micro/models/person_detect_model_data \
    $(PD)/testdata/person_image_data $(PD)/testdata/no_person_image_data
HW_GENERATED := $(HW)/models/hello_world_float_model_data $(HW)/models/hello_world_int8_model_data
MS_GENERATED := $(addprefix $(MS)/models/,$(addsuffix _model_data,$(MS_MODELS))) \
    $(addprefix $(MS)/testdata/,$(addsuffix _audio_data,$(MS_WAVS)))
MS_WINDOWS := $(addprefix $(APPS)/micro_speech/,$(addsuffix _window.bin,$(MS_WAVS)))
.PHONY: micro-speech-windows
micro-speech-windows: $(MS_WINDOWS)

# --- objects --------------------------------------------------------------------
# Sources of the tests tree and the generated arrays, each where it lies.
# Every object waits for all generated headers (the tests include them).
APPS_HEADERS := $(addprefix $(APPS_GEN)/,$(addsuffix .h,$(PD_GENERATED) $(HW_GENERATED) $(MS_GENERATED)))

$(APPS)/obj/tests/%.o: $(TFLM_TESTS)/%.cc $(APPS_HEADERS) | check-cortex-m4
	@mkdir -p $(@D)
	$(CXX.cortex-m4) $(APPS_CXXFLAGS) -c $< -o $@

$(APPS)/obj-cmsis/tests/%.o: $(TFLM_TESTS)/%.cc $(APPS_HEADERS) | check-cortex-m4
	@mkdir -p $(@D)
	$(CXX.cortex-m4) $(APPS_CXXFLAGS.cmsis) -c $< -o $@

$(APPS)/obj/gen/%.o: $(APPS_GEN)/%.cc | check-cortex-m4
	@mkdir -p $(@D)
	$(CXX.cortex-m4) $(APPS_CXXFLAGS) -c $< -o $@

$(APPS)/obj/debug_log.o: $(TFLM_TREE)/tensorflow/lite/micro/cortex_m_generic/debug_log.cc | check-cortex-m4
	@mkdir -p $(@D)
	$(CXX.cortex-m4) $(APPS_CXXFLAGS) -c $< -o $@

# Ours: the repository's warnings, TFLM's headers as system headers.
$(APPS)/obj/semihosting.o: tflm-apps/semihosting.cc | check-cortex-m4
	@mkdir -p $(@D)
	$(CXX.cortex-m4) $(ARCH.cortex-m4) $(TFLM_RUNNER_CXXFLAGS) $(TFLM_TREE_DEFS) -c $< -o $@

PD_OBJS := $(APPS)/obj/tests/$(PD)/person_detection_test.o $(APPS)/obj/tests/$(PD)/model_settings.o \
    $(addprefix $(APPS)/obj/gen/,$(addsuffix .o,$(PD_GENERATED)))
HW_OBJS := $(APPS)/obj/tests/$(HW)/hello_world_test.o \
    $(addprefix $(APPS)/obj/gen/,$(addsuffix .o,$(HW_GENERATED)))
MS_OBJS := $(APPS)/obj/tests/$(MS)/micro_speech_test.o \
    $(addprefix $(APPS)/obj/gen/,$(addsuffix .o,$(MS_GENERATED)))

# The link of TFLM's test programs on a semihosted Cortex-M: newlib's
# start-up code, heap and stack (no linker script of ours).
$(APPS)/%.elf: $(APPS_PLATFORM) $(APPS_LIB)
	$(CXX.cortex-m4) $(ARCH.cortex-m4) --specs=rdimon.specs -Wl,--gc-sections \
	    -Wl,-Map=$(@:.elf=.map) -o $@ $(filter %.o,$^) $(APPS_LIB) -lm

$(APPS)/person_detection_test.elf: $(PD_OBJS)
$(APPS)/hello_world_test.elf: $(HW_OBJS)
$(APPS)/micro_speech_test.elf: $(MS_OBJS)

# The firmware `main` of docs/deploy.md as an ordinary program for `memtrace
# check`: examples/deploy_main.cc from the header --emit-offline wrote,
# linked like the tests above (semihosting, newlib's start-up code) instead
# of on memtrace's run-time library (DEPLOY_SEMIHOSTED: main returns its
# exit code); deploy_board.cc stands in for the harness's platform file.
#
#   make -C harness-c deploy-check HEADER=/abs/OUT.h [DEPLOY_KERNELS=cmsis-nn]
#        [DEPLOY_CHECK_ELF=/abs/firmware.elf]
DEPLOY_CHECK_ELF ?= $(APPS)/deploy-check.elf
.PHONY: deploy-check
ifneq ($(APPS_FOUND),)
deploy-check: $(APPS_PLATFORM) $(TFLM_LIBDIR.cortex-m4.$(DEPLOY_LIB))/libtflm.a | check-cortex-m4
	@test -f "$(HEADER)" || { echo "error: HEADER=$(HEADER): give the absolute path of the OUT.h that --emit-offline wrote" >&2; exit 1; }
	@mkdir -p $(dir $(DEPLOY_CHECK_ELF))
	$(CXX.cortex-m4) $(ARCH.cortex-m4) $(DEPLOY_CXXFLAGS) $(TFLM_TREE_DEFS) $(TFLM_DEFS.$(DEPLOY_LIB)) \
	    -Iinclude $(TFLM_TREE_INCLUDES) -DMODEL_HEADER='"$(abspath $(HEADER))"' -DDEPLOY_SEMIHOSTED \
	    -c examples/deploy_main.cc -o $(DEPLOY_CHECK_ELF:.elf=.o)
	$(CXX.cortex-m4) $(ARCH.cortex-m4) $(DEPLOY_CXXFLAGS) -c tflm-apps/deploy_board.cc \
	    -o $(DEPLOY_CHECK_ELF:.elf=-board.o)
	$(CXX.cortex-m4) $(ARCH.cortex-m4) --specs=rdimon.specs -Wl,--gc-sections -o $(DEPLOY_CHECK_ELF) \
	    $(DEPLOY_CHECK_ELF:.elf=.o) $(DEPLOY_CHECK_ELF:.elf=-board.o) $(APPS_PLATFORM) \
	    $(TFLM_LIBDIR.cortex-m4.$(DEPLOY_LIB))/libtflm.a -lm
else
deploy-check: tflm-apps-note
endif

# TFLM's kernel tests of the operators memtrace plans, each its own program
# (micro_test_v2.h's main), on the reference kernels:
#   build/cortex-m4/tflm-apps/kernels/<op>_test.elf
TFLM_KERNEL_TESTS := activations add concatenation depthwise_conv fully_connected mul pad \
    pooling reshape softmax transpose_conv
KT := tensorflow/lite/micro/kernels
KERNEL_TEST_ELFS := $(addprefix $(APPS)/kernels/,$(addsuffix _test.elf,$(TFLM_KERNEL_TESTS)))
.PHONY: tflm-kernel-tests
tflm-kernel-tests: $(if $(APPS_FOUND),$(KERNEL_TEST_ELFS),tflm-apps-note)

$(KERNEL_TEST_ELFS): $(APPS)/kernels/%_test.elf: $(APPS_PLATFORM) $(APPS)/obj/tests/$(KT)/%_test.o $(APPS_LIB)
	@mkdir -p $(@D)
	$(CXX.cortex-m4) $(ARCH.cortex-m4) --specs=rdimon.specs -Wl,--gc-sections \
	    -Wl,-Map=$(@:.elf=.map) -o $@ $(filter %.o,$^) $(APPS_LIB) -lm

# depthwise_conv_test uses the tests tree's conv test data. (conv_test also
# needs conv_test_common.cc, which neither the TFLM tree nor its tests hold.)
$(APPS)/kernels/depthwise_conv_test.elf: $(APPS)/obj/tests/$(KT)/testdata/conv_test_data.o

# The same test on TFLM's CMSIS-NN kernels.
$(APPS)/person_detection_test_cmsis.elf: $(APPS_PLATFORM) $(subst /obj/tests/,/obj-cmsis/tests/,$(PD_OBJS)) $(APPS_LIB.cmsis)
	$(CXX.cortex-m4) $(ARCH.cortex-m4) --specs=rdimon.specs -Wl,--gc-sections \
	    -Wl,-Map=$(@:.elf=.map) -o $@ $(filter %.o,$^) $(APPS_LIB.cmsis) -lm
