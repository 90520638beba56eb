"""torch.save / torch.load of exported graphs (being written)."""


def reduce_exported(gm):
    return torch_fx_reduce(gm)


def torch_fx_reduce(gm):
    import torch.fx

    return torch.fx.GraphModule.__reduce__(gm)
