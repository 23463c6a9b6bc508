"""Saves the TorchScript model the C++ example runs: a small scorer for track-like rows.

    python examples/cpp/make_model.py OUT.pt [--aoti OUT.pt2 --rows ROWS --batch BATCH
                                              --device cpu|cuda]

It takes the three tensors zerohop maps out of the track table, kin (n, 3), position (n, 3)
and covariance (n, 3, 3), all strided views of one buffer, and returns one score per row.
The weights are fixed (seeded) so the C++ side can check the numbers against Python's.

With --aoti it also compiles the same model with AOTInductor (torch.export, then
aoti_compile_and_package) for the CMS example's tables of ROWS rows: a package runs with the
strides of the inputs it was exported with and does not check them, so it is exported over
tensors laid out as zerohop's views of a BATCH-row slice of such a table are (every column
and component one pitch apart), with the batch dimension dynamic. Every row slice of that
table then runs with no copy; a table of another row count has another pitch, which the C++
side refuses by the pitch written beside the package (OUT.pt2.pitch).
"""

import argparse

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


ALIGNMENT = 128


def pitch_of(rows):
    """Elements from one column (or Eigen component) to the next, by CMS's rules."""
    return -(-rows * 4 // ALIGNMENT) * ALIGNMENT // 4


def save_aoti(model, path, rows, batch, device):
    pitch = pitch_of(rows)
    memory = torch.randn(15 * pitch, device=device)  # pt, eta, phi, position, covariance
    kin = memory.as_strided((batch, 3), (1, pitch))
    position = memory.as_strided((batch, 3), (1, pitch), 3 * pitch)
    covariance = memory.as_strided((batch, 3, 3), (1, pitch, 3 * pitch), 6 * pitch)
    rows_dim = torch.export.Dim("rows", min=2, max=rows)
    exported = torch.export.export(model.to(device), (kin, position, covariance),
                                   dynamic_shapes=({0: rows_dim},) * 3)
    torch._inductor.aoti_compile_and_package(exported, package_path=path)
    with open(path + ".pitch", "w") as f:
        f.write(f"{pitch}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--aoti")
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    model = TrackScorer().eval()
    # TorchScript is what libtorch loads from C++ (torch::jit::load); torch 2.15 marks the
    # Python side deprecated, which says nothing about the C++ loader.
    warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", FutureWarning)
    torch.jit.script(model).save(args.out)
    if args.aoti:
        save_aoti(model, args.aoti, args.rows, args.batch, args.device)


if __name__ == "__main__":
    main()
