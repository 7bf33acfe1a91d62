// The module's JavaScript API over the C functions of binding.cpp. Linked with --post-js, so it
// runs inside the module's scope. Every method takes and returns JSON text (or plain text):
//   analyze(config)                             -> report
//   analyzeWithCallbacks(config, {progress(step, fraction), cancelled()})  -> report
//   presets(), schema(), version()              -> text
//   exportTorch(config, title)                  -> {ok, script, weights_base64} or {ok:false, error}
//   foldRules()                                 -> the fold rules (Node build only)
// A module has the methods of the functions it was built with (see cpp/wasm/CMakeLists.txt).

// Calls binding.cpp's function `name`: string arguments are passed as malloc'd UTF-8 copies
// (never on the stack: a config may be large), the answer is copied out as a JS string.
function biaslabCall(name, args) {
  var copies = [];
  try {
    var raw = args.map(function (a) {
      if (typeof a !== "string") return a;
      var size = lengthBytesUTF8(a) + 1;
      var ptr = _malloc(size);
      copies.push(ptr);
      stringToUTF8(a, ptr, size);
      return ptr;
    });
    return UTF8ToString(Module["_" + name].apply(null, raw));
  } finally {
    copies.forEach(function (ptr) { _free(ptr); });
  }
}

if (Module["_biaslab_analyze"]) {
  Module["analyzeWithCallbacks"] = function (config, callbacks) {
    var progress = callbacks && typeof callbacks.progress === "function" ? callbacks.progress : null;
    var cancelled = callbacks && typeof callbacks.cancelled === "function" ? callbacks.cancelled : null;
    // binding.cpp's EM_JS functions read these while the call runs.
    Module["biaslabProgress"] = progress;
    Module["biaslabCancelled"] = cancelled;
    try {
      return biaslabCall("biaslab_analyze", [String(config), progress ? 1 : 0, cancelled ? 1 : 0]);
    } finally {
      Module["biaslabProgress"] = Module["biaslabCancelled"] = null;
    }
  };
  Module["analyze"] = function (config) { return Module["analyzeWithCallbacks"](config); };
  Module["presets"] = function () { return biaslabCall("biaslab_presets", []); };
  Module["schema"] = function () { return biaslabCall("biaslab_schema", []); };
}
if (Module["_biaslab_export_torch"])
  Module["exportTorch"] = function (config, title) {
    return biaslabCall("biaslab_export_torch", [String(config), String(title === undefined ? "" : title)]);
  };
if (Module["_biaslab_fold_rules"]) Module["foldRules"] = function () { return biaslabCall("biaslab_fold_rules", []); };
Module["version"] = function () { return biaslabCall("biaslab_version", []); };
