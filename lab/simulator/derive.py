#!/usr/bin/env python3
"""Build the per-profile outputs of the lab simulator from the real recorded fixtures.

Every file written here is a mechanical transformation of a real fixture; each
transformation is described in the function that performs it and in
tests/fixtures/SOURCES.md ("Derived for the lab simulator").

Usage: python3 lab/simulator/derive.py [--fixtures DIR] [--out DIR]
Defaults: --fixtures tests/fixtures, --out tests/fixtures/derived (relative to the repo root).
Deterministic: running it twice gives byte-identical files (the unit tests check the
committed files are up to date).
"""
import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

H100_CAPTURE = "nvidia_gpu_exporter_captures/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
L40S_CAPTURE = "nvidia_gpu_exporter_captures/linux-x86_64__nvidia-l40s__595.80.txt"
H100_Q8 = "gpud/nvidia-smi-query.535.161.08.out.0.valid"
H100_TABLE8 = "gpud/nvidia-smi.550.90.07.out.0.valid"
H100_TOPO = "topo_h200_8gpu_12nic_nv18_distributedai.txt"
H100_NVLINK_E = "nvlink_e_h100_gpu0_elided_mlengineering.txt"
A100_TOPO = "topo_a100_8gpu_17nic_nv12_bond_spaces_xuesongtap.txt"
A100_NVLINK = "gpud/nvidia-smi.nvlink.status.a100"
A100_XML = "nvsmi_xml/telegraf_a100-sxm4-v12.xml"
A10_Q = "gpud/nvidia-smi-query.535.129.03.out.0.valid.a10"
RTX4090_Q8 = "gpud/nvidia-smi-query.535.154.05.out.0.valid.4090"
L40S_TOPO = "topo_4xA10_sys_2nic_spaces_xuesongtap.txt"
DCGM_R1 = "dcgmi_diag_r1_8xH200_azure_ndv5_persistence_fail.txt"
DCGM_R1_JSON = "derived/dcgmi_diag_r1_8xH200.json"

# GPUi keeps the NIC that is PXB to it in the H200 fixture; the other four are dropped.
H100_KEEP_NICS = [0, 3, 4, 5, 6, 9, 10, 11]


def read(fixtures, rel):
    with open(os.path.join(fixtures, rel), encoding="utf-8", newline="") as handle:
        return handle.read()


# --------------------------------------------------------------------------- captures
def capture_section(text, title):
    """Body of one '# <title>' section of an nvidia_gpu_exporter capture (without banner)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line == "# " + title:
            start = i + 1
            while lines[start].startswith("#"):
                start += 1
            end = start
            while end < len(lines) and not lines[end].startswith("####"):
                end += 1
            body = lines[start:end]
            while body and body[-1] == "":
                body.pop()
            return body
    raise ValueError("section %r not found" % title)


def capture_query_csv(text):
    body = capture_section(text, "idle :: query-gpu (csv, what the exporter parses)")
    header = body[0].split(", ")
    values = body[1].split(", ")
    if len(header) != len(values):
        raise ValueError("query-gpu header/value count mismatch")
    return header, values


def capture_aliases(text):
    """'"name" or "gpu_name"' lines of --help-query-gpu -> {alias: canonical}."""
    aliases = {}
    for line in capture_section(text, "capabilities :: help-query-gpu"):
        names = re.findall(r'"([^"]+)"', line)
        if line.startswith('"') and len(names) > 1 and re.fullmatch(r'("[^"]+"( or )?)+', line):
            for alias in names[1:]:
                aliases[alias] = names[0]
    return aliases


# --------------------------------------------------------------------------- -q text
def q_split(text):
    """-q text -> (header lines, [gpu block lines...]); blocks start at 'GPU <busid>'."""
    lines = text.rstrip("\n").split("\n")
    header, blocks = [], []
    for line in lines:
        if line.startswith("GPU "):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
        else:
            header.append(line)
    for block in blocks:
        while block and block[-1] == "":
            block.pop()
    return header, blocks


def q_join(header, blocks):
    out = list(header)
    for i, block in enumerate(blocks):
        out.extend(block)
        if i != len(blocks) - 1:
            out.append("")
    return "\n".join(out) + "\n"


def q_value(block, key):
    for line in block:
        if line.strip().startswith(key) and ":" in line:
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    raise KeyError(key)


def q_set(block, key, value, indent=None):
    """Set 'key : value' keeping the column of the colon."""
    for i, line in enumerate(block):
        name, sep, _ = line.partition(":")
        if sep and name.strip() == key and (indent is None or len(name) - len(name.lstrip()) == indent):
            block[i] = name + ": " + value
            return
    raise KeyError(key)


def identities_from_q(text):
    _, blocks = q_split(text)
    ids = []
    for block in blocks:
        ids.append({
            "bus_id": q_value(block, "Bus Id"),
            "uuid": q_value(block, "GPU UUID"),
            "serial": q_value(block, "Serial Number"),
        })
    return ids


# --------------------------------------------------------------------------- topo
def retab(text):
    """Undo a tabs-to-spaces conversion (8-column tab stops) in the matrix part of a topo -m.

    Only the matrix (lines before the first empty line) is touched; the legend is kept.
    A cell ' X ' followed by a tab expands to ' X ' + 5 spaces, so a chunk ' X' is restored
    to ' X '. The result expands back (str.expandtabs(8)) to the original.
    """
    lines = text.split("\n")
    out = []
    in_matrix = True
    for line in lines:
        if line == "":
            in_matrix = False
        if not in_matrix:
            out.append(line)
            continue
        cells, current = [], ""
        pos = 0
        while pos + 8 <= len(line):
            chunk = line[pos:pos + 8]
            pos += 8
            if chunk.endswith(" "):
                current += chunk.rstrip(" ")
                if current == " X":
                    current = " X "
                cells.append(current)
                current = ""
            else:
                current += chunk
        tail = current + line[pos:]
        new = "\t".join(cells) + "\t" + tail if cells else tail
        if new.expandtabs(8) != line:
            raise ValueError("retab round-trip failed for line %r" % line)
        out.append(new)
    return "\n".join(out)


def topo_reduce_h100(text):
    """H200 12-NIC topo -> 8 NICs: keep NIC columns/rows 0,3,4,5,6,9,10,11, renumber NIC0..7,
    rewrite the NIC Legend to mlx5_0..mlx5_7. Values and the rest of the lines are kept."""
    lines = text.split("\n")
    header = lines[0].split("\t")
    nic_cols = {int(c[3:]): i for i, c in enumerate(header) if re.fullmatch(r"NIC\d+", c)}
    drop_cols = {nic_cols[n] for n in nic_cols if n not in H100_KEEP_NICS}
    renumber = {"NIC%d" % old: "NIC%d" % new for new, old in enumerate(H100_KEEP_NICS)}
    out = []
    section = "matrix"
    for line in lines:
        if line.startswith("Legend:"):
            section = "legend"
        elif line.startswith("NIC Legend:"):
            section = "nic_legend"
        if section == "matrix" and line:
            cells = line.split("\t")
            if re.fullmatch(r"NIC\d+", cells[0]) and int(cells[0][3:]) not in H100_KEEP_NICS:
                continue
            cells = [c for i, c in enumerate(cells) if i not in drop_cols]
            cells = [renumber.get(c, c) for c in cells]
            out.append("\t".join(cells))
        elif section == "nic_legend" and re.match(r"  NIC\d+: ", line):
            old = int(re.match(r"  NIC(\d+):", line).group(1))
            if old in H100_KEEP_NICS:
                new = H100_KEEP_NICS.index(old)
                out.append("  NIC%d: mlx5_%d" % (new, new))
        else:
            out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------- nvlink
def nvlink_s_replicate(block_lines, name, ids):
    """Repeat one GPU's link lines under 'GPU i: <name> (UUID: <uuid>)' for each GPU."""
    out = []
    for i, ident in enumerate(ids):
        out.append("GPU %d: %s (UUID: %s)" % (i, name, ident["uuid"]))
        out.extend(block_lines)
    return "\n".join(out) + "\n"


def nvlink_e_expand(text, links, ids, name):
    """Elided '-e' (links 0, 1, [...], 17) -> every link 0..links-1 with the same three
    counter lines (all 0 in the fixture) and the fixture's blank-line separators, per GPU."""
    lines = text.rstrip("\n").split("\n")
    link0 = [l for l in lines if re.match(r"\s+Link 0: ", l)]
    body = []
    for link in range(links):
        if link:
            body.append("")
        body.extend(l.replace("Link 0:", "Link %d:" % link, 1) for l in link0)
    out = []
    for i, ident in enumerate(ids):
        out.append("GPU %d: %s (UUID: %s)" % (i, name, ident["uuid"]))
        out.extend(body)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- query-gpu rows
def csv_rows(header, values, ids, overrides=None):
    """One row per GPU: the capture's values with the identity fields replaced."""
    rows = []
    for i, ident in enumerate(ids):
        row = dict(zip(header, values))
        bus = ident["bus_id"]  # 00000000:19:00.0
        dom, b, rest = bus.split(":")
        row.update({
            "index": str(i),
            "count": str(len(ids)),
            "uuid": ident["uuid"],
            "serial": ident["serial"] if ident["serial"] != "N/A" else "[N/A]",
            "pci.bus_id": bus,
            "pci.domain": "0x%04X" % int(dom, 16),
            "pci.bus": "0x%s" % b.upper(),
            "pci.device": "0x%s" % rest.split(".")[0].upper(),
        })
        if overrides:
            row.update(overrides)
        rows.append([row[h] for h in header])
    return "\n".join(", ".join(r) for r in [header] + rows) + "\n"


# --------------------------------------------------------------------------- table
def table_replicate(single, ids, name_fix=None):
    """Single-GPU default table -> N GPUs: the GPU row (3 lines) is repeated with the index and
    Bus-Id replaced, rows separated by the row-end rule line, like the 8-GPU gpud table."""
    lines = single.rstrip("\n").split("\n")
    first = next(i for i, l in enumerate(lines) if l.startswith("|=") and "+" in l) + 1
    row, rule = lines[first:first + 3], lines[first + 3]
    old_bus = re.search(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d", row[0]).group(0)
    out = lines[:first]
    for i, ident in enumerate(ids):
        r0 = row[0].replace(old_bus, ident["bus_id"])
        r0 = "|" + ("%4d" % i) + r0[5:]
        out.extend([r0] + row[1:] + [rule])
    out.extend(lines[first + 4:])
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- A100 from XML
A100_Q_MAP = [
    # (-q key path, XML path under <gpu>)
    ("Product Name", "product_name"), ("Product Brand", "product_brand"),
    ("Product Architecture", "product_architecture"), ("Display Mode", "display_mode"),
    ("Display Active", "display_active"), ("Persistence Mode", "persistence_mode"),
    ("Addressing Mode", "addressing_mode"),
    ("Accounting Mode", "accounting_mode"), ("Accounting Mode Buffer Size", "accounting_mode_buffer_size"),
    ("VBIOS Version", "vbios_version"), ("MultiGPU Board", "multigpu_board"),
    ("Board Part Number", "board_part_number"), ("GPU Part Number", "gpu_part_number"),
    ("FRU Part Number", "gpu_fru_part_number"),
    ("Inforom Version/Image Version", "inforom_version/img_version"),
    ("Inforom Version/OEM Object", "inforom_version/oem_object"),
    ("Inforom Version/ECC Object", "inforom_version/ecc_object"),
    ("Inforom Version/Power Management Object", "inforom_version/pwr_object"),
    ("GPU Operation Mode/Current", "gpu_operation_mode/current_gom"),
    ("GPU Operation Mode/Pending", "gpu_operation_mode/pending_gom"),
    ("GSP Firmware Version", "gsp_firmware_version"),
    ("GPU Virtualization Mode/Virtualization Mode", "gpu_virtualization_mode/virtualization_mode"),
    ("GPU Virtualization Mode/Host VGPU Mode", "gpu_virtualization_mode/host_vgpu_mode"),
    ("GPU Reset Status/Reset Required", "gpu_reset_status/reset_required"),
    ("GPU Reset Status/Drain and Reset Recommended", "gpu_reset_status/drain_and_reset_recommended"),
    ("PCI/Device Id", "pci/pci_device_id"), ("PCI/Sub System Id", "pci/pci_sub_system_id"),
    ("PCI/GPU Link Info/PCIe Generation/Max", "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
    ("PCI/GPU Link Info/PCIe Generation/Current", "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
    ("PCI/GPU Link Info/PCIe Generation/Device Current", "pci/pci_gpu_link_info/pcie_gen/device_current_link_gen"),
    ("PCI/GPU Link Info/PCIe Generation/Device Max", "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"),
    ("PCI/GPU Link Info/PCIe Generation/Host Max", "pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"),
    ("PCI/GPU Link Info/Link Width/Max", "pci/pci_gpu_link_info/link_widths/max_link_width"),
    ("PCI/GPU Link Info/Link Width/Current", "pci/pci_gpu_link_info/link_widths/current_link_width"),
    ("PCI/Replays Since Reset", "pci/replay_counter"), ("PCI/Replay Number Rollovers", "pci/replay_rollover_counter"),
    ("PCI/Tx Throughput", "pci/tx_util"), ("PCI/Rx Throughput", "pci/rx_util"),
    ("PCI/Atomic Caps Inbound", "pci/atomic_caps_inbound"), ("PCI/Atomic Caps Outbound", "pci/atomic_caps_outbound"),
    ("Fan Speed", "fan_speed"), ("Performance State", "performance_state"),
    ("FB Memory Usage/Total", "fb_memory_usage/total"), ("FB Memory Usage/Reserved", "fb_memory_usage/reserved"),
    ("FB Memory Usage/Used", "fb_memory_usage/used"), ("FB Memory Usage/Free", "fb_memory_usage/free"),
    ("BAR1 Memory Usage/Total", "bar1_memory_usage/total"), ("BAR1 Memory Usage/Used", "bar1_memory_usage/used"),
    ("BAR1 Memory Usage/Free", "bar1_memory_usage/free"),
    ("Compute Mode", "compute_mode"),
    ("ECC Mode/Current", "ecc_mode/current_ecc"), ("ECC Mode/Pending", "ecc_mode/pending_ecc"),
    ("ECC Errors/Volatile/SRAM Correctable", "ecc_errors/volatile/sram_correctable"),
    ("ECC Errors/Volatile/DRAM Correctable", "ecc_errors/volatile/dram_correctable"),
    ("ECC Errors/Volatile/DRAM Uncorrectable", "ecc_errors/volatile/dram_uncorrectable"),
    ("ECC Errors/Aggregate/SRAM Correctable", "ecc_errors/aggregate/sram_correctable"),
    ("ECC Errors/Aggregate/DRAM Correctable", "ecc_errors/aggregate/dram_correctable"),
    ("ECC Errors/Aggregate/DRAM Uncorrectable", "ecc_errors/aggregate/dram_uncorrectable"),
    ("Retired Pages/Single Bit ECC", "retired_pages/multiple_single_bit_retirement/retired_count"),
    ("Retired Pages/Double Bit ECC", "retired_pages/double_bit_retirement/retired_count"),
    ("Retired Pages/Pending Page Blacklist", "retired_pages/pending_blacklist"),
    ("GPU Power Readings/Power Draw", "gpu_power_readings/power_draw"),
    ("GPU Power Readings/Current Power Limit", "gpu_power_readings/current_power_limit"),
    ("GPU Power Readings/Requested Power Limit", "gpu_power_readings/requested_power_limit"),
    ("GPU Power Readings/Default Power Limit", "gpu_power_readings/default_power_limit"),
    ("GPU Power Readings/Min Power Limit", "gpu_power_readings/min_power_limit"),
    ("GPU Power Readings/Max Power Limit", "gpu_power_readings/max_power_limit"),
    ("Module Power Readings/Power Draw", "module_power_readings/power_draw"),
    ("Module Power Readings/Current Power Limit", "module_power_readings/current_power_limit"),
    ("Module Power Readings/Requested Power Limit", "module_power_readings/requested_power_limit"),
    ("Module Power Readings/Default Power Limit", "module_power_readings/default_power_limit"),
    ("Module Power Readings/Min Power Limit", "module_power_readings/min_power_limit"),
    ("Module Power Readings/Max Power Limit", "module_power_readings/max_power_limit"),
    ("Clocks/Graphics", "clocks/graphics_clock"), ("Clocks/SM", "clocks/sm_clock"),
    ("Clocks/Memory", "clocks/mem_clock"), ("Clocks/Video", "clocks/video_clock"),
    ("Applications Clocks/Graphics", "applications_clocks/graphics_clock"),
    ("Applications Clocks/Memory", "applications_clocks/mem_clock"),
    ("Default Applications Clocks/Graphics", "default_applications_clocks/graphics_clock"),
    ("Default Applications Clocks/Memory", "default_applications_clocks/mem_clock"),
    ("Deferred Clocks/Memory", "deferred_clocks/mem_clock"),
    ("Max Clocks/Graphics", "max_clocks/graphics_clock"), ("Max Clocks/SM", "max_clocks/sm_clock"),
    ("Max Clocks/Memory", "max_clocks/mem_clock"), ("Max Clocks/Video", "max_clocks/video_clock"),
    ("Max Customer Boost Clocks/Graphics", "max_customer_boost_clocks/graphics_clock"),
    ("Clock Policy/Auto Boost", "clock_policy/auto_boost"),
    ("Clock Policy/Auto Boost Default", "clock_policy/auto_boost_default"),
    ("Fabric/State", "fabric/state"), ("Fabric/Status", "fabric/status"),
]
# Temperature keys in the absolute-threshold layout of the A10 -q (same 535 driver branch).
A100_TEMP_MAP = [
    ("GPU Current Temp", "temperature/gpu_temp"), ("GPU T.Limit Temp", "temperature/gpu_temp_tlimit"),
    ("GPU Shutdown Temp", "temperature/gpu_temp_max_threshold"),
    ("GPU Slowdown Temp", "temperature/gpu_temp_slow_threshold"),
    ("GPU Max Operating Temp", "temperature/gpu_temp_max_gpu_threshold"),
    ("GPU Target Temperature", "temperature/gpu_target_temperature"),
    ("Memory Current Temp", "temperature/memory_temp"),
    ("Memory Max Operating Temp", "temperature/gpu_temp_max_mem_threshold"),
]
# query-gpu field -> XML path (values with units, as -q -x prints them; '16x' widths stripped).
A100_CSV_MAP = {
    "driver_version": "../driver_version", "name": "product_name",
    "pcie.link.gen.current": "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    "pcie.link.gen.gpucurrent": "pci/pci_gpu_link_info/pcie_gen/device_current_link_gen",
    "pcie.link.gen.max": "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    "pcie.link.gen.gpumax": "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen",
    "pcie.link.gen.hostmax": "pci/pci_gpu_link_info/pcie_gen/max_host_link_gen",
    "pcie.link.width.current": "pci/pci_gpu_link_info/link_widths/current_link_width",
    "pcie.link.width.max": "pci/pci_gpu_link_info/link_widths/max_link_width",
    "pci.device_id": "pci/pci_device_id", "pci.sub_device_id": "pci/pci_sub_system_id",
    "display_mode": "display_mode", "display_active": "display_active",
    "persistence_mode": "persistence_mode", "addressing_mode": "addressing_mode",
    "vbios_version": "vbios_version", "inforom.img": "inforom_version/img_version",
    "inforom.oem": "inforom_version/oem_object", "inforom.ecc": "inforom_version/ecc_object",
    "inforom.pwr": "inforom_version/pwr_object",
    "fan.speed [%]": "fan_speed", "pstate": "performance_state",
    "memory.total [MiB]": "fb_memory_usage/total", "memory.reserved [MiB]": "fb_memory_usage/reserved",
    "memory.used [MiB]": "fb_memory_usage/used", "memory.free [MiB]": "fb_memory_usage/free",
    "compute_mode": "compute_mode",
    "ecc.mode.current": "ecc_mode/current_ecc", "ecc.mode.pending": "ecc_mode/pending_ecc",
    "ecc.errors.corrected.volatile.dram": "ecc_errors/volatile/dram_correctable",
    "ecc.errors.corrected.volatile.sram": "ecc_errors/volatile/sram_correctable",
    "ecc.errors.uncorrected.volatile.dram": "ecc_errors/volatile/dram_uncorrectable",
    "ecc.errors.uncorrected.volatile.sram": "ecc_errors/volatile/sram_uncorrectable",
    "ecc.errors.corrected.aggregate.dram": "ecc_errors/aggregate/dram_correctable",
    "ecc.errors.corrected.aggregate.sram": "ecc_errors/aggregate/sram_correctable",
    "ecc.errors.uncorrected.aggregate.dram": "ecc_errors/aggregate/dram_uncorrectable",
    "ecc.errors.uncorrected.aggregate.sram": "ecc_errors/aggregate/sram_uncorrectable",
    "temperature.gpu": "temperature/gpu_temp", "temperature.memory": "temperature/memory_temp",
    "power.draw [W]": "gpu_power_readings/power_draw",
    "power.limit [W]": "gpu_power_readings/current_power_limit",
    "enforced.power.limit [W]": "gpu_power_readings/current_power_limit",
    "power.default_limit [W]": "gpu_power_readings/default_power_limit",
    "power.min_limit [W]": "gpu_power_readings/min_power_limit",
    "power.max_limit [W]": "gpu_power_readings/max_power_limit",
    "clocks.current.graphics [MHz]": "clocks/graphics_clock", "clocks.current.sm [MHz]": "clocks/sm_clock",
    "clocks.current.memory [MHz]": "clocks/mem_clock", "clocks.current.video [MHz]": "clocks/video_clock",
    "clocks.applications.graphics [MHz]": "applications_clocks/graphics_clock",
    "clocks.applications.memory [MHz]": "applications_clocks/mem_clock",
    "clocks.default_applications.graphics [MHz]": "default_applications_clocks/graphics_clock",
    "clocks.default_applications.memory [MHz]": "default_applications_clocks/mem_clock",
    "clocks.max.graphics [MHz]": "max_clocks/graphics_clock", "clocks.max.sm [MHz]": "max_clocks/sm_clock",
    "clocks.max.memory [MHz]": "max_clocks/mem_clock",
    "fabric.state": "fabric/state", "fabric.status": "fabric/status",
    "retired_pages.double_bit.count": "retired_pages/double_bit_retirement/retired_count",
    "retired_pages.pending": "retired_pages/pending_retirement",
    "clocks_event_reasons.gpu_idle": "clocks_event_reasons/clocks_event_reason_gpu_idle",
    "clocks_event_reasons.applications_clocks_setting":
        "clocks_event_reasons/clocks_event_reason_applications_clocks_setting",
    "clocks_event_reasons.sw_power_cap": "clocks_event_reasons/clocks_event_reason_sw_power_cap",
    "clocks_event_reasons.hw_slowdown": "clocks_event_reasons/clocks_event_reason_hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown": "clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown":
        "clocks_event_reasons/clocks_event_reason_hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown": "clocks_event_reasons/clocks_event_reason_sw_thermal_slowdown",
    "clocks_event_reasons.sync_boost": "clocks_event_reasons/clocks_event_reason_sync_boost",
}


def xml_get(gpu, root, path):
    node = root if path.startswith("../") else gpu
    node = node.find(path[3:] if path.startswith("../") else path)
    return None if node is None else (node.text or "").strip()


def csv_value(raw, field):
    """XML value -> query-gpu CSV value: N/A -> [N/A]; '16x' -> '16'; '27 C' -> '27' for
    temperature fields (query-gpu prints them bare, see the H100 capture)."""
    if raw in (None, "N/A"):
        return "[N/A]"
    if field.startswith("pcie.link.width"):
        return raw.rstrip("x")
    if field.startswith("temperature."):
        return raw.split(" ")[0]
    return raw


def a100_q(fixtures, ids):
    """8x A100 -q: the H100 8-GPU -q layout (same 535 branch), each value line looked up in the
    A100 XML; lines with no XML counterpart are dropped; Temperature in the A10 -q's absolute
    layout; Remapped Rows 'N/A' as in the XML; Bus Id/UUID/Serial/Minor per GPU."""
    root = ET.fromstring(read(fixtures, A100_XML))
    gpu = root.find("gpu")
    header, h_blocks = q_split(read(fixtures, H100_Q8))
    header = [l for l in header]
    q_set(header, "Driver Version", xml_get(gpu, root, "../driver_version"))
    q_set(header, "CUDA Version", xml_get(gpu, root, "../cuda_version"))
    q_set(header, "Timestamp", xml_get(gpu, root, "../timestamp"))
    _, a10_blocks = q_split(read(fixtures, A10_Q))
    qmap = dict(A100_Q_MAP)
    template = h_blocks[0]
    blocks = []
    for i, ident in enumerate(ids):
        out, stack = ["GPU " + ident["bus_id"]], []
        skip_indent = None
        for line in template[1:]:
            indent = len(line) - len(line.lstrip())
            if skip_indent is not None:
                if indent > skip_indent:
                    continue
                skip_indent = None
            name, sep, value = line.partition(":")
            key = name.strip()
            level = indent // 4 - 1
            stack = stack[:level]
            path = "/".join(stack + [key])
            if key == "Temperature" and level == 0:
                out.append(line)
                a10_temp = _section(a10_blocks[0], "Temperature")
                for tline in a10_temp[1:]:
                    tname = tline.partition(":")[0]
                    xml_path = dict(A100_TEMP_MAP)[tname.strip()]
                    out.append(tname + ": " + (xml_get(gpu, root, xml_path) or "N/A"))
                skip_indent = indent
                continue
            if key == "Remapped Rows" and level == 0:
                out.append(name.ljust(len(template[1].partition(":")[0])) + ": N/A")
                skip_indent = indent
                continue
            if not sep:
                out.append(line)
                stack.append(key)
                continue
            if path in ("Serial Number",):
                out.append(name + ": " + (xml_get(gpu, root, "serial")))
            elif path == "GPU UUID":
                out.append(name + ": " + ident["uuid"])
            elif path == "Minor Number":
                out.append(name + ": " + str(i))
            elif path == "PCI/Bus Id":
                out.append(name + ": " + ident["bus_id"])
            elif path in ("PCI/Bus", "PCI/Device", "PCI/Domain"):
                dom, bus, rest = ident["bus_id"].split(":")
                val = {"PCI/Bus": "0x" + bus, "PCI/Device": "0x" + rest.split(".")[0],
                       "PCI/Domain": "0x" + dom[-4:]}[path]
                out.append(name + ": " + val)
            elif path in qmap:
                val = xml_get(gpu, root, qmap[path])
                if val is not None:
                    out.append(name + ": " + val)
        # drop headings left without children
        blocks.append(_prune(out))
    return q_join(header, blocks)


def _section(block, title):
    for i, line in enumerate(block):
        if line == "    " + title:
            end = i + 1
            while end < len(block) and block[end].startswith("        "):
                end += 1
            return block[i:end]
    raise KeyError(title)


def _prune(lines):
    changed = True
    while changed:
        changed = False
        keep = []
        for i, line in enumerate(lines):
            if i and ":" not in line:
                indent = len(line) - len(line.lstrip())
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if len(nxt) - len(nxt.lstrip()) <= indent:
                    changed = True
                    continue
            keep.append(line)
        lines = keep
    return lines


def a100_csv(fixtures, header, ids):
    """8x A100 query-gpu rows: the H100 capture's field list; each field with an XML
    counterpart takes the A100 XML value (N/A -> [N/A]); every other field is [N/A]."""
    root = ET.fromstring(read(fixtures, A100_XML))
    gpu = root.find("gpu")
    values = []
    for field in header:
        if field in A100_CSV_MAP:
            values.append(csv_value(xml_get(gpu, root, A100_CSV_MAP[field]), field))
        elif field == "timestamp":
            values.append("[N/A]")
        else:
            values.append("[N/A]")
    serial = xml_get(gpu, root, "serial")
    ids = [dict(ident, serial=serial) for ident in ids]
    return csv_rows(header, values, ids)


# --------------------------------------------------------------------------- main
def dcgmi_pass_table(text):
    """The recorded level-1 table with its one failing test passing: the Persistence Mode cell "Fail" ->
    "Pass" (same width) and its "Error" row with the continuation rows under it dropped; every other line
    verbatim (Metadata, the eight passing tests, the frame)."""
    out, dropping = [], False
    for line in text.split("\n"):
        parts = line.split("|")
        name = parts[1].strip() if len(parts) >= 4 and not line.startswith("|-") else None
        if dropping and name == "":
            continue
        dropping = False
        if name == "Error":
            dropping = True
            continue
        if name == "Persistence Mode":
            line = line.replace("| Fail ", "| Pass ", 1)
        out.append(line)
    return "\n".join(out)


def dcgmi_pass_json(text):
    """derived/dcgmi_diag_r1_8xH200.json with the Persistence Mode result {"status": "Pass"} (its warning
    dropped), as the table above; same layout (indent 2)."""
    doc = json.loads(text)
    for cat in doc["DCGM GPU Diagnostic"]["test_categories"]:
        for test in cat["tests"]:
            if test["name"] == "Persistence Mode":
                test["results"] = [{"status": "Pass"}]
    return json.dumps(doc, indent=2) + "\n"


def derive(fixtures, out):
    files = {}
    h100_cap = read(fixtures, H100_CAPTURE)
    l40s_cap = read(fixtures, L40S_CAPTURE)
    h100_q8 = read(fixtures, H100_Q8)
    h100_ids = identities_from_q(h100_q8)

    # ---- hgx-h100-8gpu
    p = "hgx-h100-8gpu/"
    files[p + "topo.txt"] = topo_reduce_h100(read(fixtures, H100_TOPO))
    link_lines = capture_section(h100_cap, "capabilities :: nvlink -s")[1:]
    files[p + "nvlink_s.txt"] = nvlink_s_replicate(link_lines, "NVIDIA H100 80GB HBM3", h100_ids)
    files[p + "nvlink_e.txt"] = nvlink_e_expand(read(fixtures, H100_NVLINK_E), 18, h100_ids,
                                                "NVIDIA H100 80GB HBM3")
    header, values = capture_query_csv(h100_cap)
    _, blocks = q_split(h100_q8)
    app = {
        # 590 deprecated application clocks; the 535 -q of the same GPU model still reports them
        "clocks.applications.graphics [MHz]": q_value(_section(blocks[0], "Applications Clocks"), "Graphics"),
        "clocks.applications.memory [MHz]": q_value(_section(blocks[0], "Applications Clocks"), "Memory"),
        "clocks.default_applications.graphics [MHz]":
            q_value(_section(blocks[0], "Default Applications Clocks"), "Graphics"),
        "clocks.default_applications.memory [MHz]":
            q_value(_section(blocks[0], "Default Applications Clocks"), "Memory"),
    }
    files[p + "query_gpu.csv"] = csv_rows(header, values, h100_ids, app)

    files[p + "version.txt"] = "\n".join(capture_section(h100_cap, "capabilities :: version")) + "\n"

    # ---- hgx-a100-8gpu
    p = "hgx-a100-8gpu/"
    files[p + "topo.txt"] = retab(read(fixtures, A100_TOPO))
    a100_nv = read(fixtures, A100_NVLINK)
    a100_ids = [{"uuid": u, "bus_id": ident["bus_id"], "serial": "N/A"}
                for u, ident in zip(re.findall(r"UUID: (GPU-[0-9a-f-]+)", a100_nv), h100_ids)]
    files[p + "query_gpu.csv"] = a100_csv(fixtures, header, a100_ids)
    files[p + "q.txt"] = a100_q(fixtures, a100_ids)
    e_text = nvlink_e_expand(read(fixtures, H100_NVLINK_E), 12, a100_ids, "NVIDIA A100-SXM4-80GB")
    files[p + "nvlink_e.txt"] = e_text
    table = read(fixtures, H100_TABLE8)
    table = table.replace("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
    table = table.replace("/  700W", "/  500W").replace("/  81559MiB", "/  81920MiB")
    files[p + "table.txt"] = table
    root = ET.fromstring(read(fixtures, A100_XML))
    drv, cuda = root.findtext("driver_version"), root.findtext("cuda_version")
    version = "\n".join(capture_section(h100_cap, "capabilities :: version")) + "\n"
    version = re.sub(r"(NVIDIA-SMI version  : ).*", r"\g<1>" + drv, version)
    version = re.sub(r"(NVML version        : ).*", r"\g<1>" + ".".join(drv.split(".")[:2]), version)
    version = re.sub(r"(DRIVER version      : ).*", r"\g<1>" + drv, version)
    version = re.sub(r"(CUDA Version        : ).*", r"\g<1>" + cuda, version)
    files[p + "version.txt"] = version

    # ---- pcie-l40s-4gpu
    p = "pcie-l40s-4gpu/"
    l40s_ids = identities_from_q(read(fixtures, RTX4090_Q8))[:4]
    files[p + "topo.txt"] = retab(read(fixtures, L40S_TOPO))
    header_l, values_l = capture_query_csv(l40s_cap)
    files[p + "query_gpu.csv"] = csv_rows(header_l, values_l, l40s_ids)
    qbody = "\n".join(capture_section(l40s_cap, "idle :: query (-q)")) + "\n"
    qh, qb = q_split(qbody)
    q_set(qh, "Attached GPUs", "4")
    blocks = []
    for i, ident in enumerate(l40s_ids):
        block = list(qb[0])
        block[0] = "GPU " + ident["bus_id"]
        q_set(block, "GPU UUID", ident["uuid"])
        q_set(block, "Minor Number", str(i))
        q_set(block, "Bus Id", ident["bus_id"])
        dom, bus, rest = ident["bus_id"].split(":")
        q_set(block, "Bus", "0x" + bus, indent=8)
        q_set(block, "Device", "0x" + rest.split(".")[0], indent=8)
        blocks.append(block)
    files[p + "q.txt"] = q_join(qh, blocks)
    files[p + "table.txt"] = table_replicate(
        "\n".join(capture_section(l40s_cap, "idle :: nvidia-smi (default table)")), l40s_ids)
    files[p + "version.txt"] = "\n".join(capture_section(l40s_cap, "capabilities :: version")) + "\n"
    nv = capture_section(l40s_cap, "capabilities :: nvlink -s")
    files[p + "nvlink_s.txt"] = nvlink_s_replicate(nv[1:], "NVIDIA L40S", l40s_ids)

    # ---- dcgmi diag -r 1 (every profile): the recorded H200 run with persistence mode on
    files["dcgmi/diag_r1_pass.txt"] = dcgmi_pass_table(read(fixtures, DCGM_R1))
    files["dcgmi/diag_r1_pass.json"] = dcgmi_pass_json(read(fixtures, DCGM_R1_JSON))

    aliases = capture_aliases(h100_cap)
    aliases.update(capture_aliases(l40s_cap))
    files["query_gpu_aliases.json"] = json.dumps(aliases, indent=1, sort_keys=True) + "\n"

    for rel, text in sorted(files.items()):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    return sorted(files)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixtures", default=os.path.join(REPO, "tests", "fixtures"))
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "derived"))
    args = parser.parse_args(argv)
    for rel in derive(args.fixtures, args.out):
        print(os.path.join(args.out, rel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
