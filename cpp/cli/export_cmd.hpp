// `biaslab export-torch`: an experiment as a PyTorch script, with its exact weights.
#pragma once

#include <string>
#include <vector>

namespace biaslab_cli {

// The usage lines main.cpp prints with the other commands.
extern const char* const kExportTorchUsage;

// args: everything after `export-torch`. Returns the exit code: 0, or 2 on bad input (config,
// arguments, unreadable or unfitting --load file, unwritable output), with a message on stderr.
int cmd_export_torch(const std::vector<std::string>& args);

}  // namespace biaslab_cli
