"""A simple training loop, independent of the model: batches from a DataLoader with
workers, AdamW, gradient clipping, callbacks at the end of each batch."""

import time
from collections import defaultdict

import torch
from mingpt.utils import CfgNode as CN
from torch.utils.data.dataloader import DataLoader


class Trainer:

    @staticmethod
    def get_default_config():
        C = CN()
        C.device = "auto"
        C.num_workers = 4
        C.max_iters = None
        C.batch_size = 64
        C.learning_rate = 3e-4
        C.betas = (0.9, 0.95)
        C.grad_norm_clip = 1.0
        return C

    def __init__(self, config, model, train_dataset):
        self.config = config
        self.model = model
        self.train_dataset = train_dataset
        self.callbacks = defaultdict(list)
        if config.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            self.device = config.device
        self.model = self.model.to(self.device)
        print("running on device", self.device)
        self.iter_num = 0
        self.iter_time = 0.0

    def add_callback(self, onevent, callback):
        self.callbacks[onevent].append(callback)

    def trigger_callbacks(self, onevent):
        for callback in self.callbacks.get(onevent, []):
            callback(self)

    def run(self):
        model, config = self.model, self.config
        self.optimizer = model.configure_optimizers(config)
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True,
                                                   num_samples=int(1e10)),
            shuffle=False,
            batch_size=config.batch_size,
            num_workers=config.num_workers,
        )
        print(f"loading batches with {config.num_workers} worker processes")
        model.train()
        self.iter_time = time.time()
        data_iter = iter(train_loader)
        while True:
            x, y = [t.to(self.device) for t in next(data_iter)]
            _, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
            self.optimizer.step()
            self.trigger_callbacks("on_batch_end")
            self.iter_num += 1
            self.iter_time = time.time()
            if config.max_iters is not None and self.iter_num >= config.max_iters:
                break
