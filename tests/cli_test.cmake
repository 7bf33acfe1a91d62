# CLI behaviour: exit codes, error messages with JSON paths, formats, stdin, presets.
# Run by ctest as: cmake -DBIASLAB=<path to biaslab> -P cli_test.cmake
set(tmp "${CMAKE_CURRENT_BINARY_DIR}/cli_test_tmp")
file(MAKE_DIRECTORY "${tmp}")
set(failures 0)

# run(<name> <expected exit> <stdout regex> <stderr regex> [INPUT file] ARGS ...)
function(run name expect_rc out_re err_re)
  cmake_parse_arguments(R "" "INPUT" "ARGS" ${ARGN})
  if(R_INPUT)
    execute_process(COMMAND ${BIASLAB} ${R_ARGS} INPUT_FILE "${R_INPUT}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  else()
    execute_process(COMMAND ${BIASLAB} ${R_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  endif()
  set(ok TRUE)
  if(NOT rc STREQUAL "${expect_rc}")
    set(ok FALSE)
  endif()
  if(out_re AND NOT out MATCHES "${out_re}")
    set(ok FALSE)
  endif()
  if(err_re AND NOT err MATCHES "${err_re}")
    set(ok FALSE)
  endif()
  if(ok)
    message(STATUS "ok   ${name}")
  else()
    string(SUBSTRING "${out}" 0 600 out_head)
    message(STATUS "FAIL ${name}: exit ${rc} (expected ${expect_rc})\n  stdout: ${out_head}\n  stderr: ${err}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  endif()
endfunction()

file(WRITE "${tmp}/bad_heads.json"
  [[{"version": 1, "shape": {"features": 64}, "layers": [{"type": "linear"}, {"type": "relu"}, {"type": "attention", "num_heads": 5}]}]])
file(WRITE "${tmp}/malformed.json" [[{"version": 1, "layers": [ {"type": "linear"} }]])
file(WRITE "${tmp}/unknown_type.json" [[{"version": 1, "layers": [{"type": "conv2d"}]}]])
file(WRITE "${tmp}/small.json"
  [[{"version": 1, "seed": 3, "shape": {"batch": 2, "tokens": 4, "features": 8}, "layers": [{"type": "linear"}, {"type": "batchnorm"}]}]])

# The Jacobian is stacked at the output's width (768), not the hidden width (3072). One token a
# sample: too few for token rows (plan_rows), so every row is stacked.
file(WRITE "${tmp}/wide_mlp.json"
  [[{"version": 1, "shape": {"batch": 32, "tokens": 1, "features": 768}, "layers": [{"type": "linear", "out_features": 3072}, {"type": "layernorm"}, {"type": "linear", "out_features": 768}, {"type": "layernorm"}]}]])
# With an activation instead of the LayerNorm, the first bias's Gram matrix comes from the
# layers' factors (3072 x 3072), and the same shape is answered instead of refused.
file(WRITE "${tmp}/wide_gelu_mlp.json"
  [[{"version": 1, "shape": {"batch": 32, "tokens": 1, "features": 768}, "layers": [{"type": "linear", "out_features": 3072}, {"type": "gelu"}, {"type": "linear", "out_features": 768}, {"type": "layernorm"}]}]])
# One token a sample: every row is stacked (plan_rows), 4096 directions x 256 rows x 4096.
file(WRITE "${tmp}/huge_jacobian.json"
  [[{"version": 1, "shape": {"batch": 256, "tokens": 1, "features": 4096}, "layers": [{"type": "linear"}, {"type": "layernorm"}]}]])
set(deep "")
foreach(i RANGE 29)
  string(APPEND deep "{\"type\": \"linear\"}, {\"type\": \"layernorm\"}, ")
endforeach()
file(WRITE "${tmp}/too_much_work.json"
  "{\"version\": 1, \"shape\": {\"batch\": 1, \"tokens\": 32, \"features\": 1024}, \"layers\": [${deep}{\"type\": \"relu\"}]}")

run("analyze a preset as a table" 0 "Biases.*redundant.*Folds.*Smallest equivalent model.*Invariances" ""
    ARGS analyze --preset article1-linear-batchnorm)
run("analyze a preset as json" 0 "\"ok\": true.*\"biases\"" "" ARGS analyze --preset default --format json)
run("analyze as markdown" 0 "\\| param \\|.*\\|---\\|" "" ARGS analyze "${tmp}/small.json" --format markdown)
run("analyze from stdin" 0 "layers.0.bias +8 of 8 +redundant" "" INPUT "${tmp}/small.json" ARGS analyze -)
run("bad num_heads names the path" 2 "" "layers\\[2\\]\\.num_heads: .*5.*64" ARGS analyze "${tmp}/bad_heads.json")
run("bad config in json format gives an error object" 2 "\"ok\": false.*\"path\": \"layers\\[2\\]\\.num_heads\"" ""
    ARGS analyze "${tmp}/bad_heads.json" --format json)
run("malformed json" 2 "" "error: .*line" ARGS analyze "${tmp}/malformed.json")
run("unknown layer type" 2 "" "layers\\[0\\]\\.type: .*conv2d" ARGS analyze "${tmp}/unknown_type.json")
run("a Jacobian beyond the memory limit names the layer" 2 "" "layers\\[0\\]: .*Jacobian.*limit" ARGS analyze "${tmp}/huge_jacobian.json")
run("the Jacobian's size counts the width it is stacked at" 2 "" "layers\\[0\\]: .*layers\\.0\\.bias needs a Jacobian of up to 72 M entries per input \\(3072 directions x 32 tokens x width 768\\)"
    ARGS analyze "${tmp}/wide_mlp.json")
run("a wide MLP's first bias is answered from its layers' factors" 0 "layers\\.0\\.bias +0 of 3072 +effective" ""
    ARGS analyze "${tmp}/wide_gelu_mlp.json" --no-sweep)
run("a Gram matrix over the memory budget is refused with its layer" 2 ""
    "layers\\[0\\]: the analysis needs at least 132 MB of memory at once \\(the Gram matrix of layers\\.0\\.bias.*more than the 120 MB"
    ARGS analyze "${tmp}/wide_gelu_mlp.json" --no-folds --memory-budget 0.12)
run("a memory budget is a size" 2 "" "--memory-budget takes a size in GB above 0" ARGS analyze --preset default --memory-budget lots)
run("work beyond the limit is refused up front" 2 "" "layers: .*GFLOP; the limit is 1000 GFLOP" ARGS analyze "${tmp}/too_much_work.json")
run("missing file" 2 "" "cannot read" ARGS analyze "${tmp}/does_not_exist.json")
run("a directory is not a config file" 2 "" "cannot read .*cli_test_tmp" ARGS analyze "${tmp}")
# A syntax error at a byte that is not UTF-8 (here the first of the two bytes of an e acute): the
# report quotes it escaped, where it used to throw from the JSON writer (exit 1, no report).
string(ASCII 195 lead_byte)
file(WRITE "${tmp}/not_utf8.json" "${lead_byte}")
run("a syntax error at a byte that is not UTF-8 is a report" 2 "\"ok\": false.*invalid JSON at line 1, column 1.*xC3" ""
    INPUT "${tmp}/not_utf8.json" ARGS analyze - --format json)
run("unknown preset" 2 "" "unknown preset" ARGS analyze --preset nope)
run("unknown format" 2 "" "unknown format" ARGS analyze --preset default --format yaml)
run("unknown command" 2 "" "unknown command" ARGS frobnicate)
run("no arguments prints usage" 2 "usage:" "")
run("presets lists the article checks" 0 "article2-key-bias.*article4-layernorm-linear" "" ARGS presets)
run("preset prints a config" 0 "\"layers\"" "" ARGS preset article4-layernorm-linear)
run("schema lists layer types" 0 "\"layer_types\".*\"name\": \"attention\"" "" ARGS schema)
run("version" 0 "biaslab [0-9]+\\.[0-9]+" "" ARGS version)

# A preset printed by `preset` analyses the same as --preset (one source for both).
execute_process(COMMAND ${BIASLAB} preset article1-linear-layernorm OUTPUT_FILE "${tmp}/preset.json")
execute_process(COMMAND ${BIASLAB} analyze "${tmp}/preset.json" --format json OUTPUT_VARIABLE a)
execute_process(COMMAND ${BIASLAB} analyze --preset article1-linear-layernorm --format json OUTPUT_VARIABLE b)
# Wall-clock fields differ between runs; everything else must not.
foreach(v a b)
  string(REGEX REPLACE "\"timing_ms\": {[^{}]*({[^{}]*}[^{}]*)*}" "" ${v} "${${v}}")
endforeach()
if(a STREQUAL b)
  message(STATUS "ok   preset file and --preset give the same report")
else()
  message(STATUS "FAIL preset file and --preset differ")
  math(EXPR failures "${failures} + 1")
endif()

# export-torch: the script and weights are written; bad input is exit code 2 with a reason.
run("export-torch writes a script and weights" 0 "" "wrote .*x.py and .*x.safetensors"
    ARGS export-torch --preset default -o "${tmp}/x.py" --weights "${tmp}/x.safetensors" --structure-inputs 2)
run("export-torch to standard output" 0 "import torch.*def build_model" "" ARGS export-torch "${tmp}/small.json" -o -)
run("export-torch reads back its own weights" 0 "" "wrote"
    ARGS export-torch --preset default --load "${tmp}/x.safetensors" -o "${tmp}/y.py")
run("export-torch needs -o" 2 "" "needs -o" ARGS export-torch --preset default)
run("export-torch bad config names the path" 2 "" "layers\\[2\\]\\.num_heads" ARGS export-torch "${tmp}/bad_heads.json" -o "${tmp}/z.py")
run("export-torch unknown preset" 2 "" "unknown preset" ARGS export-torch --preset nope -o "${tmp}/z.py")
run("export-torch weights of another config" 2 "" "x.safetensors: .*is missing"
    ARGS export-torch "${tmp}/small.json" --load "${tmp}/x.safetensors" -o "${tmp}/z.py")
run("export-torch damaged weights" 2 "" "malformed.json: .*header length" ARGS export-torch "${tmp}/small.json" --load "${tmp}/malformed.json" -o "${tmp}/z.py")
run("export-torch unwritable script" 2 "" "cannot write" ARGS export-torch --preset default -o "${tmp}/no/such/dir/x.py")
run("export-torch structure inputs need weights" 2 "" "needs --weights" ARGS export-torch --preset default -o "${tmp}/z.py" --structure-inputs 3)
run("export-torch bad structure input count" 2 "" "from 0 to 64" ARGS export-torch --preset default -o "${tmp}/z.py" --weights "${tmp}/z.safetensors" --structure-inputs many)

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} CLI checks failed")
endif()
