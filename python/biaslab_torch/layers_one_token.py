"""Variants of layer classes in layers.py, emitted in their place when the experiment has one
value per feature (BatchNorm: batch x tokens = 1), one value per group (GroupNorm: batch x tokens
x features per group = 1) or one token (InstanceNorm). They keep the
class names of the plain ones, so they live in their own module.
"""
from .head import torch, nn
from .layers import FeaturesLast

# @export batchnorm_class_one_value


class BatchNorm1d(FeaturesLast, nn.BatchNorm1d):
    def forward(self, x):
        # torch refuses batch statistics of one value per feature (here batch * tokens = 1), but
        # they are defined (x - mean = 0): a duplicated token leaves the mean and the biased
        # variance exactly unchanged.
        if self.training and x.shape[0] * x.shape[1] == 1:
            return super().forward(torch.cat([x, x], dim=1))[:, :1]
        return super().forward(x)
# @export groupnorm_one_value


class GroupNorm(FeaturesLast, nn.GroupNorm):
    def forward(self, x):
        # torch refuses group statistics of one value (batch x tokens x features per group = 1),
        # but they are defined (x - mean = 0): a duplicated token leaves the mean and the biased
        # variance exactly unchanged.
        if x.shape[0] * x.shape[1] * (x.shape[2] // self.num_groups) == 1:
            return super().forward(torch.cat([x, x], dim=1))[:, :1]
        return super().forward(x)
# @export instancenorm_one_token


class InstanceNorm1d(FeaturesLast, nn.InstanceNorm1d):
    def forward(self, x):
        # torch refuses instance statistics over one token ("more than 1 spatial element"), but
        # they are defined (x - mean = 0): a duplicated token leaves the mean and the biased
        # variance exactly unchanged.
        if x.shape[1] == 1:
            return super().forward(torch.cat([x, x], dim=1))[:, :1]
        return super().forward(x)
