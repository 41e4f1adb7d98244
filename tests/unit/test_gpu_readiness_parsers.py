"""PCIe ACS (lspci) and DCGM diagnostic (dcgmi diag -j) parsers on real outputs published in public
mailing lists, repositories and issue threads (tests/fixtures/public/README.md names each source), and
on hostile variants made here from that real text: cut, CRLF, junk, empty, no root, error text."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmaprov.parsers.dcgm import DiagTest, parse_diag
from rdmaprov.parsers.lspci import ACS_FLAGS, parse_lspci

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "public"

N1SDP = "lspci_vvxxx_D_N1SDP_plx_pex8749_downstream_acsctl_reqredir_on.txt"
TITAN = "lspci_vvv_nn_path_addresses_comet_lake_root_ports_reqredir_on_navi_switch_titan_ridge.txt"
SUNRISE = "lspci_vvnn_sunrise_point_lp_root_port_acsctl_all_off_iwlwifi.txt"
NONROOT = "lspci_vvvvv_nonroot_dell_haswell_capabilities_access_denied_abridged.txt"
NVVS = "nvvs_json_dcgm_3.1.0_8gpu_pass_warning_line_before_json_nulls_in_tests.txt"
DCGM4_EXCERPT = "dcgmi_diag_j_dcgm4_diagnostic_test_8gpu_info_capped_excerpt_abridged.txt"

PLX_DOWNSTREAM = [f"0000:02:{device}.0" for device in ("08", "10", "11", "12", "13", "14")]
REDIRECT_ON = ("SrcValid", "ReqRedir", "CmpltRedir")


def _read(name: str) -> str:
    return (PUBLIC / name).read_text()


# ── lspci: real outputs ──────────────────────────────────────────────────────────────────────────


def test_plx_switch_downstream_ports_with_redirect_on_are_named_with_their_domain():
    report = parse_lspci(_read(N1SDP))
    assert report.unknown is None
    assert [d.address for d in report.devices] == [
        "0000:00:00.0",
        "0000:01:00.0",
        "0000:01:00.1",
        "0000:01:00.2",
        "0000:01:00.3",
        "0000:01:00.4",
        *PLX_DOWNSTREAM,
        "0000:06:00.0",
        "0000:07:00.0",
        "0000:08:00.0",
        "0001:00:00.0",
    ]
    assert [d.address for d in report.redirecting()] == PLX_DOWNSTREAM
    assert {d.redirect_flags for d in report.redirecting()} == {REDIRECT_ON}
    port = report.redirecting()[0]
    assert port.description.startswith("PCI bridge: PLX Technology, Inc. Device 8749 (rev ca)")
    assert port.acs_control == {
        "SrcValid": True,
        "TransBlk": False,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": True,
        "EgressCtrl": False,
        "DirectTrans": False,
    }
    upstream = report.devices[1]
    assert upstream.is_bridge and not upstream.has_acs and upstream.acs_control is None
    assert [d.address for d in report.bridges()] == ["0000:00:00.0", "0000:01:00.0", *PLX_DOWNSTREAM]
    assert report.unjudged() == []


def test_the_same_output_without_domains_gives_the_same_addresses():
    with_domain = parse_lspci(_read(N1SDP))
    without = parse_lspci(_read(N1SDP).replace("\n0000:", "\n").removeprefix("0000:"))
    assert without.unknown is None
    assert [d.address for d in without.devices] == [d.address for d in with_domain.devices]
    assert [d.address for d in without.redirecting()] == PLX_DOWNSTREAM


def test_root_ports_switch_ports_and_srcvalid_only_bridges_in_path_form():
    report = parse_lspci(_read(TITAN))
    assert report.unknown is None and len(report.devices) == 33
    redirecting = {d.address: d.redirect_flags for d in report.redirecting()}
    assert redirecting == {
        "0000:00:1b.0": REDIRECT_ON,  # Comet Lake root ports
        "0000:00:1c.0": REDIRECT_ON,
        "0000:00:1c.1": REDIRECT_ON,
        "0000:00:1c.4": REDIRECT_ON,
        "0000:02:00.0": REDIRECT_ON,  # Navi 10 switch downstream port (-PP path 00:01.0/01:00.0/02:00.0)
        "0000:08:00.0": ("SrcValid",),  # Titan Ridge ports: SrcValid+ only, NVIDIA's tell
        "0000:08:01.0": ("SrcValid",),
        "0000:08:02.0": ("SrcValid",),
        "0000:08:04.0": ("SrcValid",),
    }
    gpu = next(d for d in report.devices if d.address == "0000:03:00.0")
    assert not gpu.is_bridge and gpu.has_acs and gpu.redirect_flags == ()
    assert gpu.description.startswith("VGA compatible controller [0300]: Advanced Micro Devices")
    no_acs = [d.address for d in report.bridges() if not d.has_acs]
    assert no_acs == ["0000:00:01.0", "0000:01:00.0", "0000:07:00.0"]


def test_a_root_port_with_acs_off_is_clear():
    report = parse_lspci(_read(SUNRISE))
    assert report.unknown is None and len(report.devices) == 20
    [port] = report.bridges()
    assert port.address == "0000:00:1c.0"
    assert port.acs_control == dict.fromkeys(ACS_FLAGS, False)
    assert report.redirecting() == []


def test_lspci_without_root_cannot_judge_acs():
    report = parse_lspci(_read(NONROOT))
    assert report.unknown is not None and report.unknown.startswith("lspci ran without root")
    assert "8 bridge(s)" in report.unknown and "run it as root" in report.unknown
    assert len(report.devices) == 25 and report.redirecting() == []
    assert len(report.unjudged()) == 8
    assert [d.address for d in report.devices if not d.access_denied] == ["0000:7f:08.0", "0000:7f:08.2"]


# ── lspci: hostile variants of the real text ─────────────────────────────────────────────────────


def _cut_inside(text: str, address: str, before: str) -> str:
    """The text up to (not including) `before` inside the block of `address`."""
    block = text.index(address + " ")
    return text[: text.index(before, block)]


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ("", "empty lspci output"),
        ("   \n\t\n", "empty lspci output"),
        ("\tCapabilities: <access denied>\n", "no lspci device block found"),
        ("command not found: lspci\n", "no lspci device block found"),
        ("\x00\x01ELF\x02\x00" * 40, "binary data"),
    ],
)
def test_lspci_text_that_is_no_output_is_unknown(variant, reason):
    report = parse_lspci(variant)
    assert report.unknown is not None and reason in report.unknown
    assert report.redirecting() == []


def test_lspci_output_cut_before_an_acs_line_is_unknown_not_clear():
    text = _read(N1SDP)
    cut = _cut_inside(text, "0000:02:10.0", "\tCapabilities: [f24 v1] Access Control Services")
    report = parse_lspci(cut)
    assert report.unknown == (
        "lspci output ends inside the block of 0000:02:10.0 (truncated): what followed is unknown"
    )
    mid_line = _cut_inside(text, "0000:02:11.0", "ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl-")
    assert "truncated" in (parse_lspci(mid_line).unknown or "")
    mid_header = text[: text.index("0000:02:12.0 PCI bridge") + len("0000:02:1")]
    assert "truncated" in (parse_lspci(mid_header).unknown or "")
    for size in range(0, len(text), 997):  # wherever it is cut: a verdict or a reason, never an exception
        parse_lspci(text[:size])


def test_lspci_output_whose_last_blank_line_was_stripped_is_whole():
    report = parse_lspci(_read(TITAN).rstrip())
    assert report.unknown is None and len(report.redirecting()) == 9


def test_windows_line_endings_read_the_same():
    lf = parse_lspci(_read(N1SDP))
    crlf = parse_lspci(_read(N1SDP).replace("\n", "\r\n"))
    assert crlf.unknown is None and crlf.devices == lf.devices


def test_junk_around_the_output_is_skipped():
    text = "sudo: unable to resolve host gpu-01\n" + _read(SUNRISE) + "$ exit\n"
    report = parse_lspci(text)
    assert report.unknown is None and [d.address for d in report.bridges()] == ["0000:00:1c.0"]


def test_an_acsctl_line_missing_flags_is_unjudged():
    text = _read(N1SDP).replace(
        "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-",
        "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+",
        1,
    )
    report = parse_lspci(text)
    assert report.unknown == "ACS capability printed without a complete ACSCtl line on bridge(s) 0000:02:08.0"
    assert [d.address for d in report.unjudged()] == ["0000:02:08.0"]
    assert [d.address for d in report.redirecting()] == PLX_DOWNSTREAM[1:]


def test_a_bridge_without_root_in_an_otherwise_readable_output_is_unknown():
    text = _read(SUNRISE)  # the root port's capabilities replaced the way lspci prints them without root
    block = text.index("00:1c.0 PCI bridge")
    caps, driver = text.index("\tCapabilities:", block), text.index("\tKernel driver in use:", block)
    report = parse_lspci(text[:caps] + "\tCapabilities: <access denied>\n" + text[driver:])
    assert report.unknown is not None and "1 bridge(s) (0000:00:1c.0)" in report.unknown
    assert [d.address for d in report.unjudged()] == ["0000:00:1c.0"] and report.redirecting() == []


# ── dcgmi diag -j: real outputs ──────────────────────────────────────────────────────────────────

DEPLOYMENT = [
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS-related Blocks",
    "Persistence Mode",
    "Environmental Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
]


def test_dcgm3_nvvs_document_after_a_warning_line_with_nulls_between_tests():
    result = parse_diag(_read(NVVS))
    assert (result.unknown, result.version, result.level) == (None, "3.1.0", None)
    assert result.tests[:9] == [DiagTest("Deployment", name, None, "pass", "") for name in DEPLOYMENT]
    assert result.tests[9:] == [DiagTest("Custom", "software", str(gpu), "pass", "") for gpu in range(8)]
    assert result.failed() == []


def _dcgm4_document(excerpt: str) -> str:
    """The real 4.x test object, put back into the document shape DCGM 4 writes around it (keys only:
    no value is added, so the document states no version)."""
    test = excerpt.rstrip().removesuffix(",")
    return '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [\n' + test + "\n]}]}}\n"


def test_a_dcgm4_test_excerpt_alone_is_not_a_document():
    result = parse_diag(_read(DCGM4_EXCERPT))
    assert result.tests == []
    assert result.unknown == "JSON found, but it is not a DCGM diagnostic document (no 'DCGM Diagnostic' object)"


def test_dcgm4_entity_results_with_capped_info():
    result = parse_diag(_dcgm4_document(_read(DCGM4_EXCERPT)))
    assert (result.unknown, result.version, result.level) == (None, None, None)
    assert [(t.category, t.name, t.gpu, t.status) for t in result.tests] == [
        ("Hardware", "diagnostic", str(gpu), "pass") for gpu in range(8)
    ]
    assert result.tests[0].message == (
        "Allocated space for 138 output matricies from 76077622886 bytes available.; "
        "Running with precisions: FP64 1, FP32 1, FP16 1; "
        "GPU 0 calculated at approximately 859.08 gigaflops during this test"
    )
    assert result.tests[2].message.endswith("FP64 1, FP32 1, FP16 1")
    assert [t.message for t in result.tests[3:]] == [""] * 5


def test_a_failing_gpu_is_listed_by_failed():
    excerpt = _read(DCGM4_EXCERPT)
    gpu3 = excerpt.index('"entity_id" : 3')
    status = excerpt.index('"status" : "Pass"', gpu3)
    variant = excerpt[:status] + '"status" : "Fail"' + excerpt[status + len('"status" : "Pass"') :]
    result = parse_diag(_dcgm4_document(variant))
    assert [(t.name, t.gpu) for t in result.failed()] == [("diagnostic", "3")]


@pytest.mark.parametrize(
    ("word", "normalised"),
    [
        ("PASS", "pass"),
        ("Fail", "fail"),
        ("Warn", "warn"),
        ("WARNING", "warn"),
        ("Skip", "skip"),
        ("SKIPPED", "skip"),
        ("Not Run", "not run"),
    ],
)
def test_status_words_of_every_version_are_normalised(word, normalised):
    text = _read(NVVS).replace('"status" : "PASS"', f'"status" : "{word}"', 1)
    assert parse_diag(text).tests[0].status == normalised


# ── dcgmi diag -j: hostile variants ──────────────────────────────────────────────────────────────


def test_dcgmi_error_text_instead_of_json_is_unknown_with_dcgmi_words():
    # What dcgmi prints when nv-hostengine is not running (dcgmi/Command.cpp, NVIDIA/DCGM).
    text = (
        "Error: unable to establish a connection to the specified host: localhost\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
    )
    result = parse_diag(text)
    assert result.tests == [] and result.unknown == (
        "dcgmi printed an error instead of JSON: unable to establish a connection to the specified host: "
        "localhost / Unable to connect to host engine. Host engine connection invalid/disconnected. "
        "(is nvidia-dcgm, its host engine, running?)"
    )


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ("", "empty dcgmi output"),
        ("\n \n", "empty dcgmi output"),
        (
            "Successfully ran diagnostic for group.\n",
            "dcgmi output is not JSON: 'Successfully ran diagnostic for group.'",
        ),
        (
            '{"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": "The GPU is busy"}}',
            "did not run: The GPU is busy",
        ),
        ('{"DCGM GPU Diagnostic": {"test_categories": [], "version": "3.3.9"}}', "lists no test results"),
        ('{"body": {"Link 0": {}}}', "not a DCGM diagnostic document"),
    ],
)
def test_dcgmi_output_that_is_no_result_is_unknown(variant, reason):
    result = parse_diag(variant)
    assert result.tests == [] and result.unknown is not None and reason in result.unknown


def test_cut_or_corrupted_dcgm_json_is_unknown():
    text = _read(NVVS)
    for size in range(0, len(text) - 2, 97):
        result = parse_diag(text[:size])
        assert result.unknown is not None and result.tests == []
    junk = parse_diag(text.replace('"test_categories"', '"test_categories\x00', 1))
    assert junk.unknown is not None and junk.tests == []


def test_dcgm_json_with_windows_line_endings_reads_the_same():
    assert parse_diag(_read(NVVS).replace("\n", "\r\n")) == parse_diag(_read(NVVS))
