"""The import block that opens every exported script, and stand-ins for what the exporter writes
after it for each config.

Every other file here imports only from this one (and from each other), so a section cannot use
a name the exported script does not have.
"""
# @export imports
import argparse
import copy
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch import nn
from torch.autograd.functional import jacobian
from torch.nn.utils.stateless import functional_call
# @end

# The sections in the other files use every name imported above.
__all__ = ["argparse", "copy", "json", "math", "struct", "sys", "time", "np", "torch", "fwAD", "nn",
           "jacobian", "functional_call"]

# What cpp/export/torch_export.cpp writes after the imports, from the config. These stand-ins let the
# sections be imported and tested on their own; biaslab_torch.configure() replaces them.
CONFIG = {"version": 1, "seed": 0, "dtype": "float64", "shape": {"batch": 1, "tokens": 1, "features": 1},
          "layers": []}
TITLE = "A biaslab experiment"
SEED = 0
DTYPE = torch.float64
BATCH, TOKENS, FEATURES = 1, 1, 1
CONTEXT_TOKENS = 0  # cross-attention's context: every input is then (B, TOKENS + CONTEXT_TOKENS, F)
FOLDS = []  # (rule, layer names, rewrite of a model copy, why it is expected not to be exact or None)


def build_model():
    raise NotImplementedError("the exported script defines build_model() from the config")
