import random

import torch


def set_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)


class CfgNode:
    """A lightweight configuration object: attributes set freely, printed as a tree."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __str__(self):
        return "\n".join(f"{k}: {v}" for k, v in self.__dict__.items())

    def merge_from_dict(self, d):
        self.__dict__.update(d)
