"""The Python of the standalone PyTorch script that `biaslab export-torch` writes.

The build embeds these files in the binary (cmake/torch_python.cmake): a line `# @export NAME`
starts a section, which runs to the next `# @export` or `# @end` line or to the end of the file,
and becomes the C++ string `py::NAME` (generated header torch_python.hpp). The exporter
(cpp/export/torch_export.cpp) joins the sections a config needs with the parts it writes from the
config (CONFIG, SEED, DTYPE, the shape, build_model, FOLDS) into one script. Text outside the
sections (module docstrings, the imports at the top of each file) is not exported: it makes each
file importable and lintable on its own. A section's text is copied byte for byte, blank lines
included (tests/torch/export_identity.py checks the scripts against a manifest).

Each file imports only from head.py, which holds the script's import block and stand-ins for the
generated names; configure() sets those stand-ins in every module, for tests:

    import biaslab_torch as bt
    bt.configure(DTYPE=torch.float32, SEED=3, BATCH=2, TOKENS=4, FEATURES=8)
"""
from . import analysis, folds, head, layers, layers_one_token, report, weights

MODULES = (head, layers, layers_one_token, folds, weights, analysis, report)
GENERATED = ("CONFIG", "TITLE", "SEED", "DTYPE", "BATCH", "TOKENS", "FEATURES", "CONTEXT_TOKENS", "FOLDS", "build_model")


def configure(**values):
    """Sets the names the exporter generates (GENERATED) in every module that uses them."""
    for name in values:
        if name not in GENERATED:
            raise KeyError(f"{name} is not one of the generated names {GENERATED}")
    for module in MODULES:
        for name, value in values.items():
            if hasattr(module, name):
                setattr(module, name, value)
