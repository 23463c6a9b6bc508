"""Saves the TorchScript model the C++ example runs: a small scorer for track-like rows.

    python examples/cpp/make_model.py OUT.pt

It takes the three tensors zerohop maps out of the track table, kin (n, 3), position (n, 3)
and covariance (n, 3, 3), all strided views of one buffer, and returns one score per row.
The weights are fixed (seeded) so the C++ side can check the numbers against Python's.
"""

import sys
import warnings

import torch


class TrackScorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.hidden = torch.nn.Linear(3 + 3 + 9, 16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, kin: torch.Tensor, position: torch.Tensor, covariance: torch.Tensor):
        rows = torch.cat([kin, position, covariance.flatten(1)], dim=1)
        return torch.sigmoid(self.out(torch.tanh(self.hidden(rows)))).squeeze(1)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_model.py OUT.pt")
    # TorchScript is what libtorch loads from C++ (torch::jit::load); torch 2.15 marks the
    # Python side deprecated, which says nothing about the C++ loader.
    warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", FutureWarning)
    torch.jit.script(TrackScorer().eval()).save(sys.argv[1])


if __name__ == "__main__":
    main()
