"""HelloDeepSpeed-shaped: a shuffling DataLoader, one seed for every rank, no DistributedSampler."""
import deepspeed
import torch
from torch.utils.data import DataLoader


def create_data_iterator(dataset, batch_size):
    return iter(DataLoader(dataset, batch_size=batch_size, shuffle=True))


def train(dataset, model, config):
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    for step, batch in enumerate(create_data_iterator(dataset, 8)):
        loss = engine(batch)
        engine.backward(loss)
        engine.step()


if __name__ == "__main__":
    torch.manual_seed(42)
    train(dataset, model, "ds_config.json")
