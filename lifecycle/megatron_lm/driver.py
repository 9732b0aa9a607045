def pretrain(*a, **k):
    raise NotImplementedError
