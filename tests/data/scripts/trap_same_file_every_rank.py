"""DeepSpeedExamples training/imagenet/main.py-shaped: the save condition is true on every rank."""
import deepspeed
import torch


def save_checkpoint(state, filename="checkpoint.pth.tar"):
    torch.save(state, filename)


def main_worker(gpu, args):
    model, optimizer, _, _ = deepspeed.initialize(args=args, model=net, model_parameters=net.parameters())
    for epoch in range(args.epochs):
        train(model, epoch)
        if not args.multiprocessing_distributed or (args.multiprocessing_distributed and args.gpu is None):
            save_checkpoint({"epoch": epoch + 1, "state_dict": model.state_dict()})


main_worker(args.gpu, args)
