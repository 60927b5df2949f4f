"""CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER: every rule, and agreement with torch's own parser."""

from __future__ import annotations

import random

import pytest

from preflight.parse.visible_devices import (
    DeviceOrder,
    GpuIdentity,
    SelectorKind,
    VisibleDevices,
    VisibleDevicesError,
    bus_id_key,
    cuda_enumeration,
    parse_device_order,
    parse_visible_devices,
    resolve_visible_devices,
)

UUIDS = (
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-8932a001-0000-0000-0000-000000000001",
    "GPU-1c2d3e4f-0000-0000-0000-000000000002",
    "GPU-77aa0000-0000-0000-0000-000000000003",
)
BUS = ("00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0")


def same_model(count: int = 4) -> list[GpuIdentity]:
    return [GpuIdentity(i, UUIDS[i], BUS[i], "Fake H100", (9, 0)) for i in range(count)]


def mixed() -> list[GpuIdentity]:
    """An A6000 at the lower bus id and an H100 after it: FASTEST_FIRST puts the H100 first."""
    return [
        GpuIdentity(0, UUIDS[0], "00000000:17:00.0", "Fake RTX A6000", (8, 6)),
        GpuIdentity(1, UUIDS[2], "00000000:65:00.0", "Fake H100 PCIe", (9, 0)),
    ]


def resolve(raw: str | None, gpus: list[GpuIdentity] | None = None, order: DeviceOrder = DeviceOrder.FASTEST_FIRST) -> VisibleDevices:
    return resolve_visible_devices(parse_visible_devices(raw), same_model() if gpus is None else gpus, order)


def nvml_indices(
    raw: str | None, gpus: list[GpuIdentity] | None = None, order: DeviceOrder = DeviceOrder.FASTEST_FIRST
) -> list[int]:
    return [v.gpu.nvml_index for v in resolve(raw, gpus, order).gpus]


# -- the variable on its own ------------------------------------------------------------------------


def test_unset_means_every_gpu() -> None:
    setting = parse_visible_devices(None)
    assert setting.kind is SelectorKind.ALL and not setting.malformed
    assert nvml_indices(None) == [0, 1, 2, 3]


@pytest.mark.parametrize("raw", ["", " ", "   \t"])
def test_empty_or_blank_means_no_gpu(raw: str) -> None:
    setting = parse_visible_devices(raw)
    assert setting.kind is SelectorKind.NONE
    assert setting.malformed
    assert nvml_indices(raw) == []


@pytest.mark.parametrize(
    ("raw", "indices", "malformed"),
    [
        ("0,1,2", (0, 1, 2), False),
        ("2,1", (2, 1), False),  # order of the sequence is CUDA's order
        ("0, 1 ,2", (0, 1, 2), False),  # spaces around indices are skipped like strtoul does
        (" 3", (3,), False),
        ("0,1,", (0, 1), False),  # a trailing comma drops nothing
        ("0,2,-1,1", (0, 2), True),  # the CUDA Programming Guide's own example
        ("0,,1", (0,), True),
        ("abc", (), True),
        ("1gpu2,2ampere", (1, 2), True),  # torch's comment: read like strtoul
        ("+1", (1,), True),
        ("0-2", (0,), True),  # ranges are not a thing (pytorch PR #84879)
        ("0,GPU-8932f937", (0,), True),  # no mixing indices and UUIDs
        ("\u0663", (), True),  # a non-ASCII digit is not a digit to CUDA
    ],
)
def test_index_lists(raw: str, indices: tuple[int, ...], malformed: bool) -> None:
    setting = parse_visible_devices(raw)
    assert setting.kind is SelectorKind.INDEX
    assert setting.indices == indices
    assert setting.malformed is malformed


def test_cut_names_what_is_ignored() -> None:
    setting = parse_visible_devices("0,2,-1,1")
    assert setting.stop == "-1"
    assert setting.problems == ("CUDA stops reading at '-1'; 1 ignored",)


@pytest.mark.parametrize("raw", ["0,0", "0,1,0", "3,1,3", "1, 1"])
def test_a_repeated_index_empties_the_list(raw: str) -> None:
    setting = parse_visible_devices(raw)
    assert setting.duplicate is not None and setting.indices == ()
    assert "twice" in setting.problems[0]
    assert nvml_indices(raw) == []


def test_a_repeat_after_the_cut_does_not_count() -> None:
    assert parse_visible_devices("0,-1,0").indices == (0,)


@pytest.mark.parametrize(
    ("raw", "entries", "malformed"),
    [
        ("GPU-8932f937,GPU-1c2d", ("GPU-8932f937", "GPU-1c2d"), False),
        ("GPU-8932f937,0", ("GPU-8932f937",), True),
        ("GPU-8932f937, GPU-1c2d", ("GPU-8932f937",), True),
        ("GPU-8932f937,", ("GPU-8932f937",), False),
    ],
)
def test_uuid_lists(raw: str, entries: tuple[str, ...], malformed: bool) -> None:
    setting = parse_visible_devices(raw)
    assert setting.kind is SelectorKind.GPU_UUID
    assert setting.entries == entries
    assert setting.malformed is malformed


def test_space_before_a_uuid_is_called_out() -> None:
    assert "spaces" in parse_visible_devices("GPU-8932f937, GPU-1c2d").problems[0]


def test_repeated_uuid_empties_the_list() -> None:
    assert parse_visible_devices("GPU-1c2d,GPU-1c2d").entries == ()
    assert nvml_indices("GPU-1c2d,GPU-1c2d") == []


def test_mig_list_kind() -> None:
    assert parse_visible_devices("MIG-abc,MIG-def").kind is SelectorKind.MIG_UUID


def test_garbage_never_raises() -> None:
    rng = random.Random(1234)
    alphabet = "0123456789,-+ GPUMIG-abcdef/\t\n\u00e9"
    for _ in range(2000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        result = resolve(raw)
        assert result.count <= 4


# -- against torch's own parser ----------------------------------------------------------------------

TORCH_CASES = [
    "",
    "0",
    "0,1,2",
    "2,1",
    "0, 1 ,2",
    "0,2,-1,1",
    "0,,1",
    "abc",
    "1gpu2,2ampere",
    "0,0",
    "0,1,0",
    "0,-1,0",
    "0,1,",
    "GPU-8932f937,GPU-1c2d",
    "GPU-8932f937,0",
    "GPU-a,GPU-a",
    "MIG-x,MIG-y",
    "0-2",
    " 3",
]


@pytest.mark.parametrize("raw", TORCH_CASES)
def test_agrees_with_torch(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch_cuda = pytest.importorskip("torch.cuda")
    parse = getattr(torch_cuda, "_parse_visible_devices", None)
    if parse is None:
        pytest.skip("this torch has no _parse_visible_devices")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", raw)
    expected = parse()
    setting = parse_visible_devices(raw)
    ours = list(setting.indices) if setting.kind in (SelectorKind.INDEX, SelectorKind.NONE) else list(setting.entries)
    assert ours == expected


# -- resolution against the GPUs ---------------------------------------------------------------------


def test_index_past_the_last_gpu_cuts_the_list() -> None:
    result = resolve("0,9,1")
    assert [v.gpu.nvml_index for v in result.gpus] == [0]
    assert "index 9 but only 4 GPU(s)" in result.problems[-1]


def test_joins_by_bus_id_not_by_nvml_index() -> None:
    # NVML index 0 sits at the higher bus id here; PCI_BUS_ID order must follow the bus, not the index.
    gpus = [
        GpuIdentity(0, UUIDS[0], "00000000:65:00.0", "Fake H100", (9, 0)),
        GpuIdentity(1, UUIDS[1], "00000000:17:00.0", "Fake H100", (9, 0)),
    ]
    assert nvml_indices("0", gpus, DeviceOrder.PCI_BUS_ID) == [1]


def test_bus_id_spellings() -> None:
    assert bus_id_key("00000000:3A:00.0") == bus_id_key("0000:3a:00.0") == (0, 0x3A, 0, 0)
    with pytest.raises(VisibleDevicesError, match="not a PCI bus id"):
        bus_id_key("GPU 0")


def test_fastest_first_on_mixed_gpus_is_a_marked_guess() -> None:
    result = resolve("0", mixed())
    assert [v.gpu.name for v in result.gpus] == ["Fake H100 PCIe"]
    assert result.certain is False and result.count_certain is True
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in result.notes[0]


def test_pci_bus_id_order_on_mixed_gpus_is_certain() -> None:
    result = resolve("0", mixed(), DeviceOrder.PCI_BUS_ID)
    assert [v.gpu.name for v in result.gpus] == ["Fake RTX A6000"] and result.certain


def test_identical_gpus_follow_the_bus_in_both_orders() -> None:
    gpus = same_model()
    assert cuda_enumeration(gpus, DeviceOrder.FASTEST_FIRST) == cuda_enumeration(gpus, DeviceOrder.PCI_BUS_ID)


@pytest.mark.parametrize(
    ("raw", "picked", "problem"),
    [
        ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", [0], None),
        ("GPU-8932f", [0], None),  # a unique prefix is enough
        ("GPU-1c2d,GPU-8932a", [2, 1], None),
        ("GPU-8932,GPU-1c2d", [], "ambiguous prefix"),  # 8932 starts two UUIDs
        ("GPU-1c2d,GPU-ffff,GPU-77aa", [2], "matches no GPU"),
        ("GPU-", [], "ambiguous prefix"),
        ("GPU-1c2d,GPU-1c2d3e", [], "already listed"),  # two prefixes of one GPU
    ],
)
def test_uuid_prefix_rules(raw: str, picked: list[int], problem: str | None) -> None:
    result = resolve(raw)
    assert [v.gpu.nvml_index for v in result.gpus] == picked
    if problem is None:
        assert result.problems == ()
    else:
        assert problem in result.problems[-1]


def test_uuid_selection_ignores_device_order() -> None:
    assert nvml_indices("GPU-8932f", mixed()) == [0]


def mig_node() -> list[GpuIdentity]:
    return [
        GpuIdentity(
            0, UUIDS[0], BUS[0], "Fake A100", (8, 0), mig_enabled=True, mig_uuids=("MIG-aaaa1111", "MIG-bbbb2222")
        ),
        GpuIdentity(1, UUIDS[2], BUS[1], "Fake A100", (8, 0)),
    ]


def test_mig_uuid_picks_its_parent_gpu() -> None:
    result = resolve("MIG-bbbb", mig_node())
    assert [(v.gpu.nvml_index, v.mig_uuid) for v in result.gpus] == [(0, "MIG-bbbb2222")]


def test_only_one_mig_device_per_process() -> None:
    result = resolve("MIG-aaaa,MIG-bbbb", mig_node())
    assert result.count == 1
    assert "only the first" in result.notes[0]


def test_old_mig_format_names_the_parent() -> None:
    result = resolve(f"MIG-{UUIDS[0]}/1/0", mig_node())
    assert [v.gpu.nvml_index for v in result.gpus] == [0]


def test_mig_gpu_picked_by_index_makes_the_count_uncertain() -> None:
    result = resolve("0,1", mig_node())
    assert result.count_certain is False
    assert "MIG is enabled on GPU 0" in result.notes[-1]


def test_describe_names_cuda_and_nvml_indices() -> None:
    assert resolve("2,0").describe() == "cuda0 = GPU 2 (00000000:3A:00.0), cuda1 = GPU 0 (00000000:18:00.0)"
    assert resolve("").describe() == "no GPU"


# -- CUDA_DEVICE_ORDER ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "order"),
    [
        (None, DeviceOrder.FASTEST_FIRST),
        ("FASTEST_FIRST", DeviceOrder.FASTEST_FIRST),
        ("PCI_BUS_ID", DeviceOrder.PCI_BUS_ID),
    ],
)
def test_device_order_values(raw: str | None, order: DeviceOrder) -> None:
    assert parse_device_order(raw) is order


@pytest.mark.parametrize("raw", ["pci_bus_id", "PCI", "", " PCI_BUS_ID"])
def test_unknown_device_order_raises(raw: str) -> None:
    with pytest.raises(VisibleDevicesError, match="neither FASTEST_FIRST nor PCI_BUS_ID"):
        parse_device_order(raw)
