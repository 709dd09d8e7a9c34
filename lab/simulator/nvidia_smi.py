#!/usr/bin/python3 -IS
"""Lab simulator of `nvidia-smi` (and, invoked as `dmesg`, `all_reduce_perf`, `dcgmi` or `mpirun`, of
the kernel log, nccl-tests, DCGM diagnostics and an MPI launcher that runs its program locally).

LAB ONLY. Replays real recorded nvidia-smi outputs (tests/fixtures, see SOURCES.md) for the
node's hardware profile, with settable state and injected faults. Python 3 stdlib only.
Paths (environment overrides, see lab/simulator/README.md):
  GPUSIM_ROOT      /opt/gpusim                  profiles/ and fixtures/ live here
  GPUSIM_PROFILES  $GPUSIM_ROOT/profiles
  GPUSIM_FIXTURES  $GPUSIM_ROOT/fixtures
  GPUSIM_PROFILE   (profile name; else read from $GPUSIM_PROFILE_FILE)
  GPUSIM_PROFILE_FILE /etc/gpusim/profile
  GPUSIM_STATE     /var/lib/gpusim/state.json
  GPUSIM_FAULTS    /etc/gpusim/faults.json
"""
import json
import os
import re
import sys

ENV = os.environ
ROOT = ENV.get("GPUSIM_ROOT", "/opt/gpusim")
PROFILES = ENV.get("GPUSIM_PROFILES", os.path.join(ROOT, "profiles"))
FIXTURES = ENV.get("GPUSIM_FIXTURES", os.path.join(ROOT, "fixtures"))
PROFILE_FILE = ENV.get("GPUSIM_PROFILE_FILE", "/etc/gpusim/profile")
STATE_FILE = ENV.get("GPUSIM_STATE", "/var/lib/gpusim/state.json")
FAULTS_FILE = ENV.get("GPUSIM_FAULTS", "/etc/gpusim/faults.json")

RC_OK, RC_INVALID_ARG, RC_NOT_SUPPORTED, RC_NOT_FOUND = 0, 2, 3, 6
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
FAULT_KINDS = ("gpu_missing", "nvlink_inactive", "ecc_uncorrectable", "row_remap_pending", "xid",
               "pcie_degraded", "over_temperature", "power_limit_drift", "rdma_port_down",
               "nccl_busbw_low", "dcgm_diag_fail")
# -q -d <SECTION> -> top-level headings of a GPU block in the -q text
Q_SECTIONS = {
    "MEMORY": ["FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"],
    "UTILIZATION": ["Utilization"],
    "ECC": ["ECC Mode", "ECC Errors", "Aggregate Uncorrectable SRAM Sources"],
    "TEMPERATURE": ["Temperature"],
    "POWER": ["GPU Power Readings", "Module Power Readings", "Power Readings", "Power Samples",
              "Power Smoothing", "Workload Power Profiles"],
    "CLOCK": ["Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks",
              "Max Clocks", "Max Customer Boost Clocks", "Clock Policy"],
    "COMPUTE": ["Compute Mode"],
    "PIDS": ["Processes"],
    "PERFORMANCE": ["Performance State", "Clocks Event Reasons", "Clocks Throttle Reasons",
                    "Sparse Operation Mode"],
    "PAGE_RETIREMENT": ["Retired Pages"],
    "ROW_REMAPPER": ["Remapped Rows"],
    "ACCOUNTING": ["Accounting Mode", "Accounting Mode Buffer Size"],
    "ENCODER_STATS": ["Encoder Stats"],
    "FBC_STATS": ["FBC Stats"],
    "VOLTAGE": ["Voltage"],
    "RESET_STATUS": ["GPU Reset Status"],
    "GSP_FIRMWARE_VERSION": ["GSP Firmware Version"],
    "SUPPORTED_CLOCKS": ["Supported Clocks"],
    "SUPPORTED_GPU_TARGET_TEMP": ["Supported GPU Target Temp"],
}


class Fail(Exception):
    def __init__(self, msg, rc=RC_INVALID_ARG):
        super().__init__(msg)
        self.msg, self.rc = msg, rc


def _read(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def _load_json(path, default):
    try:
        text = _read(path)
    except FileNotFoundError:
        return default
    text = text.strip()
    return json.loads(text) if text else default


# --------------------------------------------------------------------------- model
class Sim:
    def __init__(self):
        name = ENV.get("GPUSIM_PROFILE")
        if not name:
            try:
                name = _read(PROFILE_FILE).strip()
            except FileNotFoundError:
                raise Fail("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                           "driver. Make sure that the latest NVIDIA driver is installed and running.",
                           9)
        self.profile = _load_json(os.path.join(PROFILES, name + ".json"), None)
        if self.profile is None:
            raise Fail("gpusim: unknown profile %r (no %s.json in %s)" % (name, name, PROFILES), 9)
        self.faults = self._faults()
        self._rows = None

    # ---- data files
    def text(self, key):
        rel = self.profile["files"].get(key)
        return None if rel is None else _read(os.path.join(FIXTURES, rel))

    def _faults(self):
        raw = _load_json(FAULTS_FILE, {}) or {}
        out = {}
        for kind, value in raw.items():
            if kind not in FAULT_KINDS:
                continue
            out[kind] = value if isinstance(value, list) else [value]
        return out

    def fault(self, kind, gpu):
        """Fault entry of `kind` for physical GPU index `gpu` (last wins), or None."""
        found = None
        for entry in self.faults.get(kind, []):
            if int(entry.get("gpu", -1)) == gpu:
                found = entry
        return found

    @property
    def missing(self):
        return {int(e["gpu"]) for e in self.faults.get("gpu_missing", [])}

    # ---- query-gpu rows (physical order, all GPUs, with units)
    def rows(self):
        if self._rows is None:
            lines = self.text("query_gpu").rstrip("\n").split("\n")
            self.header = lines[0].split(", ")
            self._rows = [dict(zip(self.header, l.split(", "))) for l in lines[1:]]
        return self._rows

    def gpu_count(self):
        return len(self.rows())

    def visible(self):
        """[(visible index, physical index)] after gpu_missing."""
        phys = [i for i in range(self.gpu_count()) if i not in self.missing]
        return list(enumerate(phys))

    # ---- state
    def defaults(self, row):
        def num(value):
            m = re.match(r"^(\d+(?:\.\d+)?)", value or "")
            return float(m.group(1)) if m else None
        mem = num(row.get("clocks.applications.memory [MHz]"))
        gfx = num(row.get("clocks.applications.graphics [MHz]"))
        return {
            "persistence_mode": row["persistence_mode"],
            "power_limit": num(row["power.limit [W]"]) or num(row["power.default_limit [W]"]),
            "app_clocks": [int(mem), int(gfx)] if mem and gfx else None,
        }

    def load_state(self):
        state = _load_json(STATE_FILE, {}) or {}
        gpus = state.get("gpus", {})
        for row in self.rows():
            gpus.setdefault(row["uuid"], self.defaults(row))
        state["gpus"], state["profile"] = gpus, self.profile["name"]
        return state

    def save_state(self, state):
        directory = os.path.dirname(STATE_FILE)
        if directory:
            os.makedirs(directory, exist_ok=True)
        tmp = STATE_FILE + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, STATE_FILE)

    # ---- effective per-GPU values (state + faults applied)
    def effective_rows(self):
        state = self.load_state()["gpus"]
        out = []
        for vis, phys in self.visible():
            row = dict(self.rows()[phys])
            st = state[row["uuid"]]
            row["index"] = str(vis)
            row["count"] = str(len(self.visible()))
            row["persistence_mode"] = st["persistence_mode"]
            limit = "%.2f W" % st["power_limit"]
            drift = self.fault("power_limit_drift", phys)
            if drift:
                limit = "%.2f W" % float(drift["watts"])
            for key in ("power.limit [W]", "enforced.power.limit [W]"):
                if key in row:
                    row[key] = limit
            if st.get("app_clocks"):
                row["clocks.applications.memory [MHz]"] = "%d MHz" % st["app_clocks"][0]
                row["clocks.applications.graphics [MHz]"] = "%d MHz" % st["app_clocks"][1]
            ecc = self.fault("ecc_uncorrectable", phys)
            if ecc:
                count = str(int(ecc.get("count", 1)))
                for scope in ("volatile", "aggregate"):
                    for part in ("dram", "device_memory", "total"):
                        key = "ecc.errors.uncorrected.%s.%s" % (scope, part)
                        if key in row:
                            row[key] = count
            if self.fault("row_remap_pending", phys):
                row["remapped_rows.pending"] = "Yes"
            pcie = self.fault("pcie_degraded", phys)
            if pcie:
                if "width" in pcie:
                    row["pcie.link.width.current"] = str(int(pcie["width"]))
                if "gen" in pcie:
                    row["pcie.link.gen.current"] = str(int(pcie["gen"]))
                    row["pcie.link.gen.gpucurrent"] = str(int(pcie["gen"]))
            hot = self.fault("over_temperature", phys)
            if hot:
                shifted = _shift_tlimit(row.get("temperature.gpu"), row.get("temperature.gpu.tlimit"), hot["temp"])
                row["temperature.gpu"] = str(int(hot["temp"]))
                if shifted is not None:
                    row["temperature.gpu.tlimit"] = str(shifted)
            out.append((vis, phys, row))
        return out

    def select(self, target):
        """-i <index|uuid|bus id> -> [(vis, phys, row)]."""
        rows = self.effective_rows()
        if target is None:
            return rows
        picked = []
        for item in target.split(","):
            item = item.strip()
            for vis, phys, row in rows:
                if item == str(vis) or item == row["uuid"] or item.upper() in (
                        row["pci.bus_id"].upper(), row["pci.bus_id"][4:].upper()):
                    picked.append((vis, phys, row))
                    break
            else:
                raise Fail("No devices were found" if item.isdigit() else
                           "Invalid device identifier: %s" % item, RC_NOT_FOUND)
        return picked


# --------------------------------------------------------------------------- commands
def cmd_query_gpu(sim, fields, fmt, target):
    aliases = _load_json(os.path.join(FIXTURES, sim.profile["files"]["aliases"]), {})
    opts = [o.strip() for o in fmt.split(",")] if fmt else []
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        raise Fail('"%s" is not a valid format. Please run \'nvidia-smi -h\' for help.' % fmt)
    rows = sim.select(target)
    header_by_name = {}
    for h in sim.header:
        header_by_name[h.split(" [")[0]] = h
    cols = []
    for field in [f.strip() for f in fields.split(",") if f.strip()]:
        name = aliases.get(field, field)
        if name not in header_by_name:
            raise Fail('Field "%s" is not a valid field to query.\n' % field)
        cols.append(header_by_name[name])
    out = []
    if "noheader" not in opts:
        out.append(", ".join(cols))
    for _vis, _phys, row in rows:
        vals = []
        for col in cols:
            value = row.get(col, "[N/A]")
            if "nounits" in opts and " [" in col:
                unit = col.split(" [", 1)[1].rstrip("]")
                if value.endswith(" " + unit):
                    value = value[: -len(unit) - 1]
            vals.append(value)
        out.append(", ".join(vals))
    return "\n".join(out) + "\n"


def cmd_list(sim):
    return "".join("GPU %d: %s (UUID: %s)\n" % (vis, row["name"], row["uuid"])
                   for vis, _p, row in sim.effective_rows())


def cmd_version(sim):
    return sim.text("version")


def cmd_topo(sim):
    text = sim.text("topo")
    missing = sorted(sim.missing)
    if not missing:
        return text
    lines = text.split("\n")
    header = lines[0].split("\t")
    drop = {header.index("GPU%d" % g) for g in missing if "GPU%d" % g in header}
    rename = {}
    for vis, phys in sim.visible():
        rename["GPU%d" % phys] = "GPU%d" % vis
    out, matrix = [], True
    for line in lines:
        if line == "":
            matrix = False
        if matrix:
            cells = line.split("\t")
            if re.fullmatch(r"GPU\d+", cells[0]) and int(cells[0][3:]) in sim.missing:
                continue
            cells = [rename.get(c, c) for i, c in enumerate(cells) if i not in drop]
            line = "\t".join(cells)
        out.append(line)
    return "\n".join(out)


def _nvlink_blocks(text):
    blocks = []
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("GPU "):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def cmd_nvlink(sim, target, errors):
    text = sim.text("nvlink_e" if errors else "nvlink_s")
    if text is None:
        raise Fail("nvlink: this profile has no recorded output", RC_NOT_SUPPORTED)
    blocks = _nvlink_blocks(text)
    wanted = {vis for vis, _p, _r in sim.select(target)}
    out = []
    for vis, phys in sim.visible():
        if vis not in wanted or phys >= len(blocks):
            continue
        block = list(blocks[phys])
        block[0] = re.sub(r"^GPU \d+:", "GPU %d:" % vis, block[0])
        dead = sim.fault("nvlink_inactive", phys)
        has_links = any(re.match(r"\s+Link \d+:", l) for l in block[1:])
        if dead and has_links and not errors:
            links = dead.get("links")
            if links is None:
                block = [block[0], "NVML: Unable to retrieve NVLink information as all links are inactive"]
            else:
                links = {int(l) for l in links}
                for i, line in enumerate(block):
                    m = re.match(r"^(\s+Link (\d+): ).*$", line)
                    if m and int(m.group(2)) in links:
                        block[i] = m.group(1) + "<inactive>"
        out.extend(block)
    return "\n".join(out) + "\n" if out else ""


def _q_blocks(text):
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


def _q_set(block, path, value):
    """Set the line at heading path 'A/B/key' of a -q block, keeping the colon column."""
    parts = path.split("/")
    stack = []
    for i, line in enumerate(block[1:], 1):
        level = (len(line) - len(line.lstrip())) // 4 - 1
        name, sep, _ = line.partition(":")
        stack = stack[:max(level, 0)] + [name.strip()]
        if sep and stack == parts:
            block[i] = name + ": " + value
            return True
    return False


def _q_items(block):
    """[(path, value)] of the value lines of a -q block (path as a list of headings and the key)."""
    out, stack = [], []
    for line in block[1:]:
        level = (len(line) - len(line.lstrip())) // 4 - 1
        name, sep, value = line.partition(":")
        stack = stack[:max(level, 0)] + [name.strip()]
        if sep:
            out.append((list(stack), value.strip()))
    return out


def _q_get(block, path):
    """Value of the line at heading path 'A/B/key' of a -q block, or None."""
    parts = path.split("/")
    return next((value for p, value in _q_items(block) if p == parts), None)


def _shift_tlimit(current, tlimit, new_temp):
    """T.Limit is the margin left below the GPU's limit: it shrinks as the GPU heats up, so an
    injected temperature moves it by the same amount (limit = recorded current + recorded margin)."""
    try:
        return int(current) + int(tlimit) - int(new_temp)
    except (TypeError, ValueError):
        return None


def _q_section(block, title):
    for i, line in enumerate(block):
        if line.startswith("    " + title) and line[4:].partition(":")[0].strip() == title \
                and not line.startswith("     "):
            end = i + 1
            while end < len(block) and block[end].startswith("        "):
                end += 1
            return i, end
    return None


def cmd_q(sim, target, display):
    text = sim.text("q")
    header, blocks = _q_blocks(text)
    wanted = {phys for _v, phys, _r in sim.select(target)}
    state = sim.load_state()["gpus"]
    sections = None
    if display:
        sections = []
        for name in display.split(","):
            name = name.strip().upper()
            if name not in Q_SECTIONS:
                raise Fail(INVALID_ARGS)
            sections.extend(Q_SECTIONS[name])
    out_blocks = []
    for vis, phys, row in sim.effective_rows():
        if phys not in wanted:
            continue
        block = list(blocks[phys])
        st = state[row["uuid"]]
        _q_set(block, "Persistence Mode", st["persistence_mode"])
        limit = row.get("power.limit [W]", "%.2f W" % st["power_limit"])
        for sec in ("GPU Power Readings", "Power Readings"):
            _q_set(block, sec + "/Current Power Limit", limit)
            _q_set(block, sec + "/Requested Power Limit", "%.2f W" % st["power_limit"])
        if st.get("app_clocks"):
            _q_set(block, "Applications Clocks/Memory", "%d MHz" % st["app_clocks"][0])
            _q_set(block, "Applications Clocks/Graphics", "%d MHz" % st["app_clocks"][1])
        ecc = sim.fault("ecc_uncorrectable", phys)
        if ecc:
            for scope in ("Volatile", "Aggregate"):
                _q_set(block, "ECC Errors/%s/DRAM Uncorrectable" % scope, str(int(ecc.get("count", 1))))
        if sim.fault("row_remap_pending", phys):
            if not _q_set(block, "Remapped Rows/Pending", "Yes"):
                span = _q_section(block, "Remapped Rows")
                if span:
                    head = block[span[0]].partition(":")[0]
                    width = len(head) + 4
                    sub = ["Correctable Error", "Uncorrectable Error", "Pending", "Remapping Failure Occurred"]
                    vals = ["0", "0", "Yes", "No"]
                    block[span[0]:span[1]] = [head.rstrip()] + [
                        ("        " + k).ljust(width - 4) + ": " + v for k, v in zip(sub, vals)]
        pcie = sim.fault("pcie_degraded", phys)
        if pcie:
            if "gen" in pcie:
                _q_set(block, "PCI/GPU Link Info/PCIe Generation/Current", str(int(pcie["gen"])))
                _q_set(block, "PCI/GPU Link Info/PCIe Generation/Device Current", str(int(pcie["gen"])))
            if "width" in pcie:
                _q_set(block, "PCI/GPU Link Info/Link Width/Current", "%dx" % int(pcie["width"]))
        hot = sim.fault("over_temperature", phys)
        if hot:
            cur = (_q_get(block, "Temperature/GPU Current Temp") or "").split(" ")[0]
            margin = (_q_get(block, "Temperature/GPU T.Limit Temp") or "").split(" ")[0]
            _q_set(block, "Temperature/GPU Current Temp", "%d C" % int(hot["temp"]))
            shifted = _shift_tlimit(cur, margin, hot["temp"])
            if shifted is not None:
                _q_set(block, "Temperature/GPU T.Limit Temp", "%d C" % shifted)
        if sections is not None:
            keep = [block[0]]
            for title in sections:
                span = _q_section(block, title)
                if span:
                    keep.extend(block[span[0]:span[1]])
            block = keep
        out_blocks.append(block)
    lines = []
    for line in header:
        if line.startswith("Attached GPUs"):
            line = line.partition(":")[0] + ": " + str(len(sim.visible()))
        lines.append(line)
    for i, block in enumerate(out_blocks):
        lines.extend(block)
        lines.append("")
    return "\n".join(lines) + "\n" if sections is not None else "\n".join(lines[:-1]) + "\n"


def cmd_table(sim):
    text = sim.text("table")
    lines = text.rstrip("\n").split("\n")
    first = next(i for i, l in enumerate(lines) if l.startswith("|=") and "+" in l) + 1
    rows, end = [], first
    while end + 3 < len(lines) and re.match(r"^\|\s+\d+\s", lines[end]):
        rows.append(lines[end:end + 4])
        end += 4
    eff = {phys: (vis, row) for vis, phys, row in sim.effective_rows()}
    state = sim.load_state()["gpus"]
    out = lines[:first]
    for phys, chunk in enumerate(rows):
        if phys not in eff:
            continue
        vis, row = eff[phys]
        r0, r1 = chunk[0], chunk[1]
        r0 = "|" + ("%4d" % vis) + r0[5:]
        pm = "On" if state[row["uuid"]]["persistence_mode"] == "Enabled" else "Off"
        r0 = re.sub(r" *(On|Off)  \|", lambda m: (" %s  |" % pm).rjust(len(m.group(0))), r0, count=1)
        cap = int(round(float(row["power.limit [W]"].split(" ")[0])))
        r1 = re.sub(r"/ +\d+W \|", lambda m: "/" + (" %dW |" % cap).rjust(len(m.group(0)) - 1), r1, count=1)
        hot = sim.fault("over_temperature", phys)
        if hot:
            r1 = re.sub(r"^(\| \S+)( +\d+)C", lambda m: m.group(1) + (" %d" % int(hot["temp"])).rjust(
                len(m.group(2))) + "C", r1, count=1)
        ecc = sim.fault("ecc_uncorrectable", phys)
        if ecc:
            r0 = re.sub(r" +\d+ \|$", lambda m: (" %d |" % int(ecc.get("count", 1))).rjust(len(m.group(0))), r0)
        out.extend([r0, r1] + chunk[2:])
    out.extend(lines[end:])
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def cmd_pm(sim, target, value):
    if value not in ("0", "1", "ENABLED", "DISABLED", "enabled", "disabled"):
        raise Fail(INVALID_ARGS)
    enable = value in ("1", "ENABLED", "enabled")
    state = sim.load_state()
    out = []
    for _vis, _phys, row in sim.select(target):
        st = state["gpus"][row["uuid"]]
        word = "Enabled" if enable else "Disabled"
        if st["persistence_mode"] == word:
            out.append("Persistence mode is already %s for GPU %s." % (word, row["pci.bus_id"]))
        else:
            st["persistence_mode"] = word
            out.append("%s persistence mode for GPU %s." % (word, row["pci.bus_id"]))
    sim.save_state(state)
    out.append("All done.")
    return "\n".join(out) + "\n"


def cmd_pl(sim, target, value):
    try:
        watts = float(value)
    except ValueError:
        raise Fail(INVALID_ARGS)
    state = sim.load_state()
    out = []
    for _vis, _phys, row in sim.select(target):
        lo = float(row["power.min_limit [W]"].split(" ")[0])
        hi = float(row["power.max_limit [W]"].split(" ")[0])
        if not lo <= watts <= hi:
            raise Fail("Provided power limit %.2f W is not a valid power limit which should be between "
                       "%.2f W and %.2f W for GPU %s\nTerminating early due to previous errors."
                       % (watts, lo, hi, row["pci.bus_id"]))
        st = state["gpus"][row["uuid"]]
        out.append("Power limit for GPU %s was set to %.2f W from %.2f W."
                   % (row["pci.bus_id"], watts, st["power_limit"]))
        st["power_limit"] = watts
    sim.save_state(state)
    out.append("All done.")
    return "\n".join(out) + "\n"


def cmd_ac(sim, target, value):
    m = re.fullmatch(r"(\d+),(\d+)", value or "")
    if not m:
        raise Fail(INVALID_ARGS)
    mem, gfx = int(m.group(1)), int(m.group(2))
    state = sim.load_state()
    out = []
    for _vis, _phys, row in sim.select(target):
        max_mem = row.get("clocks.max.memory [MHz]", "").split(" ")[0]
        max_gfx = row.get("clocks.max.graphics [MHz]", "").split(" ")[0]
        if not (max_mem.isdigit() and max_gfx.isdigit() and mem == int(max_mem) and 0 < gfx <= int(max_gfx)):
            raise Fail("Specified clock combination \"(MEM %d, SM %d)\" is not supported for GPU %s. Run "
                       "'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock combinations\n"
                       "Terminating early due to previous errors." % (mem, gfx, row["pci.bus_id"]))
        state["gpus"][row["uuid"]]["app_clocks"] = [mem, gfx]
        out.append("Applications clocks set to \"(MEM %d, SM %d)\" for GPU %s" % (mem, gfx, row["pci.bus_id"]))
    sim.save_state(state)
    out.append("All done.")
    return "\n".join(out) + "\n"


def cmd_rac(sim, target):
    state = sim.load_state()
    out = []
    for _vis, phys, row in sim.select(target):
        state["gpus"][row["uuid"]]["app_clocks"] = sim.defaults(sim.rows()[phys])["app_clocks"]
        out.append("Applications clocks reset for GPU %s" % row["pci.bus_id"])
    sim.save_state(state)
    out.append("All done.")
    return "\n".join(out) + "\n"


def cmd_init_state(sim):
    """--gpusim-init-state: write the profile's default state (used by playbooks/lab/simulator.yml)."""
    state = _load_json(STATE_FILE, None)
    if state is not None:
        return "gpusim: state already present\n"
    state = {"profile": sim.profile["name"],
             "gpus": {row["uuid"]: sim.defaults(row) for row in sim.rows()}}
    sim.save_state(state)
    return "gpusim: state initialised\n"


# --------------------------------------------------------------------------- argv
def _take(args, i):
    """Value of option args[i] given as '--opt=value' or '--opt value' / '-o value'."""
    arg = args[i]
    if "=" in arg and arg.startswith("--"):
        return arg.split("=", 1)[1], i + 1
    if i + 1 >= len(args):
        raise Fail(INVALID_ARGS)
    return args[i + 1], i + 2


def nvidia_smi(args):
    if args[:1] in (["-h"], ["--help"]):
        return "gpusim nvidia-smi (lab simulator). See /opt/gpusim/README.md\n"
    if args[:1] == ["--version"]:
        return cmd_version(Sim())
    sim = Sim()
    if args[:1] == ["--gpusim-init-state"]:
        return cmd_init_state(sim)
    if args[:1] == ["topo"]:
        if args[1:] in (["-m"], ["--matrix"]):
            return cmd_topo(sim)
        raise Fail(INVALID_ARGS)
    if args[:1] == ["nvlink"]:
        target, errors, status, i = None, False, False, 1
        while i < len(args):
            a = args[i]
            if a in ("-s", "--status"):
                status, i = True, i + 1
            elif a in ("-e", "--errorcounters"):
                errors, i = True, i + 1
            elif a in ("-i", "--id") or a.startswith("--id="):
                target, i = _take(args, i)
            else:
                raise Fail(INVALID_ARGS)
        if not (status or errors) or (status and errors):
            raise Fail(INVALID_ARGS)
        return cmd_nvlink(sim, target, errors)
    opts = {}
    i = 0
    while i < len(args):
        a = args[i]
        key = a.split("=", 1)[0]
        if key in ("-i", "--id"):
            opts["target"], i = _take(args, i)
        elif key in ("--query-gpu",):
            opts["query"], i = _take(args, i)
        elif key in ("--format",):
            opts["format"], i = _take(args, i)
        elif key in ("-q", "--query"):
            opts["q"], i = True, i + 1
        elif key in ("-d", "--display"):
            opts["display"], i = _take(args, i)
        elif key in ("-L", "--list-gpus"):
            opts["list"], i = True, i + 1
        elif key in ("-pm", "--persistence-mode"):
            opts["pm"], i = _take(args, i)
        elif key in ("-pl", "--power-limit"):
            opts["pl"], i = _take(args, i)
        elif key in ("-ac", "--applications-clocks"):
            opts["ac"], i = _take(args, i)
        elif key in ("-rac", "--reset-applications-clocks"):
            opts["rac"], i = True, i + 1
        else:
            raise Fail(INVALID_ARGS)
    target = opts.pop("target", None)
    if "query" in opts:
        return cmd_query_gpu(sim, opts["query"], opts.get("format"), target)
    if "format" in opts:
        raise Fail(INVALID_ARGS)
    if opts.get("q"):
        return cmd_q(sim, target, opts.get("display"))
    if "display" in opts:
        raise Fail(INVALID_ARGS)
    if opts.get("list"):
        return cmd_list(sim)
    if "pm" in opts:
        return cmd_pm(sim, target, opts["pm"])
    if "pl" in opts:
        return cmd_pl(sim, target, opts["pl"])
    if "ac" in opts:
        return cmd_ac(sim, target, opts["ac"])
    if opts.get("rac"):
        return cmd_rac(sim, target)
    if target is not None:
        sim.select(target)
    return cmd_table(sim)


# --------------------------------------------------------------------------- dmesg shim
def dmesg(_args):
    """All flags are accepted and ignored. Prints the profile's recorded kernel-log lines that
    are not Xid reports, then one NVRM Xid line per injected `xid` fault."""
    try:
        sim = Sim()
    except Fail:
        return ""
    out = []
    text = sim.text("dmesg") or ""
    template = None
    for line in text.split("\n"):
        if "NVRM: Xid" in line:
            template = template or line
            continue
        if line:
            out.append(line)
    base = sim.rows()
    for entry in sim.faults.get("xid", []):
        phys = int(entry["gpu"])
        if phys >= len(base) or template is None:
            continue
        bus = base[phys]["pci.bus_id"]  # 00000000:19:00.0 -> 0000:19:00
        pci = (bus[4:8] + ":" + bus[9:11] + ":" + bus[12:14]).lower()
        m = re.match(r"^(\[[^\]]*\] NVRM: Xid \(PCI:)[^)]*(\): )(\d+)(, pid=[^,]*, name=[^,]*)(, .*)?$", template)
        code = int(entry["code"])
        message = entry.get("message")
        if message is None:
            message = m.group(5)[2:] if code == int(m.group(3)) and m.group(5) else None
        line = m.group(1) + pci + m.group(2) + str(code) + m.group(4) + (", " + message if message else "")
        out.append(line)
    return "\n".join(out) + "\n" if out else ""


# --------------------------------------------------------------------------- nccl-tests
# all_reduce_perf options that take a value (nccl-tests src/common.cu longopts); all are accepted, none
# changes the replay (the recorded sweep is what answers).
NCCL_VALUE_OPTS = {"-t", "-g", "-b", "-e", "-i", "-f", "-n", "-m", "-w", "-N", "-p", "-c", "-o", "-d", "-r",
                   "-z", "-y", "-T", "-G", "-C", "-a", "-R", "-x", "-M", "-u",
                   "--nthreads", "--ngpus", "--minbytes", "--maxbytes", "--stepbytes", "--stepfactor",
                   "--iters", "--agg_iters", "--warmup_iters", "--parallel_init", "--check", "--op",
                   "--datatype", "--root", "--blocking", "--stream_null", "--timeout", "--cudagraph",
                   "--report_cputime", "--average", "--local_register"}
# one result row: size count type redop [root] then (time algbw busbw #wrong) out-of-place and in-place
_NCCL_ROW = re.compile(r"^(\s*\d+\s+\d+\s+\S+\s+\S+(?:\s+-?\d+)?)"
                       r"((?:\s+\S+){8})(\s*)$")
_NCCL_AVG = re.compile(r"^(#\s*Avg bus bandwidth\s*:\s*)([0-9.]+)(.*)$")


def _scaled(field, factor, inverse=False):
    """`field` scaled by factor (divided when inverse), same decimals and width (right-aligned)."""
    if not re.match(r"^[0-9]+(?:\.[0-9]+)?$", field):
        return field
    decimals = len(field.split(".")[1]) if "." in field else 0
    value = float(field) / factor if inverse else float(field) * factor
    return "%.*f" % (decimals, value)


def _scale_row(line, factor):
    m = _NCCL_ROW.match(line)
    if not m:
        return line
    cols = re.findall(r"(\s+)(\S+)", m.group(2))
    out = []
    for k, (space, field) in enumerate(cols):
        if k % 4 == 3:  # #wrong
            new = field
        else:  # time scales inversely; algbw and busbw with the factor
            new = _scaled(field, factor, inverse=(k % 4 == 0))
        pad = len(space) + len(field) - len(new)
        out.append(" " * max(pad, 1) + new)
    return m.group(1) + "".join(out) + m.group(3)


def all_reduce_perf(args):
    """Replays the profile's recorded run (`nccl_allreduce`, or `nccl_allreduce_multi_node` when launched
    by the mpirun shim); `nccl_busbw_low` {"factor": f} scales every row's time (1/f), algbw and busbw
    (f) and the Avg line, keeping each field's decimals and column."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-h", "--help"):
            return "USAGE: all_reduce_perf (gpusim replays the recorded sweep; options are accepted)\n"
        attached = arg[:2] in NCCL_VALUE_OPTS and not arg.startswith("--") and len(arg) > 2
        name = arg[:2] if attached else arg.split("=", 1)[0]
        if name not in NCCL_VALUE_OPTS:
            raise Fail("all_reduce_perf: invalid option -- '%s'" % arg, 1)
        i += 1 if attached or "=" in arg else 2
        if i > len(args):
            raise Fail("all_reduce_perf: option requires an argument -- '%s'" % arg, 1)
    sim = Sim()
    key = "nccl_allreduce_multi_node" if ENV.get("GPUSIM_MPI_NP") else "nccl_allreduce"
    text = sim.text(key)
    if text is None:
        raise Fail("all_reduce_perf: gpusim profile %s records no %s run" % (sim.profile["name"], key), 1)
    low = sim.faults.get("nccl_busbw_low")
    if not low:
        return text
    factor = float(low[-1].get("factor", 0.5))
    out = []
    for line in text.split("\n"):
        m = _NCCL_AVG.match(line)
        if m:
            line = m.group(1) + _scaled(m.group(2), factor) + m.group(3)
        elif not line.lstrip().startswith("#"):
            line = _scale_row(line, factor)
        out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------- mpirun
# OpenMPI mpirun options taking one value (two for --mca/-mca); flags otherwise.
MPI_VALUE_OPTS = {"-np", "-n", "-c", "--np", "-H", "--host", "-host", "-x", "--map-by", "-map-by", "--bind-to",
                  "-bind-to", "--hostfile", "-hostfile", "--machinefile", "-machinefile", "--rank-by",
                  "-rank-by", "-npernode", "--npernode", "--prefix", "-wdir", "--wdir"}
MPI_TWO_VALUE_OPTS = {"--mca", "-mca", "--gmca", "-gmca"}


def mpirun(args):
    """Runs the program once, locally, with GPUSIM_MPI_NP/GPUSIM_MPI_HOSTS set (the simulator cannot
    start ranks on other nodes); `-x NAME=VALUE` is exported to it like OpenMPI does."""
    i, env, np_, hosts = 0, dict(ENV), None, None
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if arg in MPI_TWO_VALUE_OPTS:
            i += 3
        elif arg in MPI_VALUE_OPTS:
            if i + 1 >= len(args):
                raise Fail("mpirun: option %s needs a value" % arg, 1)
            value = args[i + 1]
            if arg in ("-np", "-n", "-c", "--np"):
                np_ = value
            elif arg in ("-H", "--host", "-host"):
                hosts = value
            elif arg == "-x" and "=" in value:
                env[value.split("=", 1)[0]] = value.split("=", 1)[1]
            i += 2
        else:
            i += 1
    if i >= len(args):
        raise Fail("mpirun: no executable was specified", 1)
    if not np_ or not np_.isdigit() or not hosts:
        raise Fail("mpirun (gpusim): give -np N and -H host:slots,... (got -np %r -H %r)" % (np_, hosts), 1)
    slots = 0
    for item in hosts.split(","):
        host, _, count = item.partition(":")
        if not host or (count and not count.isdigit()):
            raise Fail("mpirun: bad -H entry %r" % item, 1)
        slots += int(count or 1)
    if int(np_) > slots:
        raise Fail("There are not enough slots available in the system to satisfy the %s slots that were "
                   "requested by the application:\n  %s" % (np_, args[i]), 1)
    env["GPUSIM_MPI_NP"], env["GPUSIM_MPI_HOSTS"] = np_, hosts
    sys.stdout.flush()
    os.execve(args[i], [args[i]] + args[i + 1:], env)


# --------------------------------------------------------------------------- dcgmi
_DCGM_CELL = 45  # width of a wrapped message chunk in the recorded table (dcgmi_diag_r1_8xH200...)
_DCGM_MSG_MAX = 1023  # DCGM cuts a message at its 1024-byte buffer: the recorded r1 message is 1023 chars


def _dcgm_persistence_sentence(sim, gpu):
    """The recorded per-GPU Persistence Mode error (dcgmi_diag_r4 fixture, GPU 0) for `gpu`."""
    text = sim.text("dcgmi_persistence_error") or ""
    cells, found = [], False
    for line in text.split("\n"):
        parts = line.split("|")
        if len(parts) < 4:
            continue
        name = parts[1].strip()
        if name == "Error":
            found = True
        elif name:
            if found:
                break
            continue
        if found:
            cells.append(parts[2][1:1 + _DCGM_CELL])
    sentence = "".join(cells).rstrip()
    return sentence.replace("GPU 0 ", "GPU %d " % gpu, 1)


def _dcgm_failures(sim):
    """{test name: {"gpus": [..], "message": str or None}}: Persistence Mode for every GPU whose
    persistence mode is off in the simulator state, plus each `dcgm_diag_fail` entry."""
    fails = {}
    off = [vis for vis, _phys, row in sim.effective_rows() if row["persistence_mode"] != "Enabled"]
    if off:
        fails["Persistence Mode"] = {"gpus": off}
    for entry in sim.faults.get("dcgm_diag_fail", []):
        test = entry.get("test", "Persistence Mode")
        item = fails.setdefault(test, {"gpus": []})
        if "gpu" in entry and int(entry["gpu"]) not in item["gpus"]:
            item["gpus"].append(int(entry["gpu"]))
    for test, item in fails.items():
        item["gpus"].sort()
        item["message"] = None
        if test == "Persistence Mode" and item["gpus"]:
            item["message"] = ", ".join(_dcgm_persistence_sentence(sim, g) for g in item["gpus"])[:_DCGM_MSG_MAX]
    return fails


def _dcgm_table(text, fails):
    out = []
    for line in text.split("\n"):
        parts = line.split("|")
        name = parts[1].strip() if len(parts) >= 4 and not line.startswith("|-") else None
        if name in fails:
            item = fails[name]
            cell = "Fail" if item["message"] or not item["gpus"] else \
                "Fail - GPU%s: %s" % ("s" if len(item["gpus"]) > 1 else "", ", ".join(str(g) for g in item["gpus"]))
            width = len(parts[2])
            out.append("|" + parts[1] + "| " + cell.ljust(width - 1) + "|")
            msg = item["message"]
            if msg:
                chunks = [msg[k:k + _DCGM_CELL] for k in range(0, len(msg), _DCGM_CELL)]
                label = "| " + "Error".ljust(len(parts[1]) - 1)
                blank = "|" + " " * len(parts[1])
                for k, chunk in enumerate(chunks):
                    out.append((label if k == 0 else blank) + "| " + chunk.ljust(_DCGM_CELL) + "  |")
            continue
        out.append(line)
    return "\n".join(out)


def _dcgm_json(text, fails):
    doc = json.loads(text)
    for cat in doc["DCGM GPU Diagnostic"]["test_categories"]:
        for test in cat["tests"]:
            item = fails.get(test["name"])
            if item is None:
                continue
            result = {"status": "Fail"}
            if item["message"]:
                result["warnings"] = [{"warning": item["message"]}]
            elif item["gpus"]:
                result["gpu_ids"] = ",".join(str(g) for g in item["gpus"])
            test["results"] = [result]
    return json.dumps(doc, indent=2) + "\n"


def dcgmi(args):
    """`dcgmi diag -r 1 [-i ids] [-j]`: the profile's passing level-1 diagnostic (`dcgmi_diag` table,
    `dcgmi_diag_json` for -j), with Persistence Mode failing for GPUs whose persistence mode is off
    (the recorded error text) and each `dcgm_diag_fail` test failing. Exit status when a test fails:
    226, the value tests/unit/test_dcgm.py models for the failing run (no fixture records dcgmi's rc)."""
    if args[:1] != ["diag"]:
        raise Fail("dcgmi (gpusim): only 'diag' is simulated", 1)
    level, as_json, i = None, False, 1
    while i < len(args):
        arg = args[i]
        if arg in ("-r", "--run") and i + 1 < len(args):
            level, i = args[i + 1], i + 2
        elif arg in ("-i", "--gpuList", "-g", "--group") and i + 1 < len(args):
            i += 2
        elif arg in ("-j", "--json"):
            as_json, i = True, i + 1
        else:
            raise Fail("PARSE ERROR: Argument: %s (Unknown option)" % arg, 255)
    if level not in ("1", "short", "quick"):
        raise Fail("dcgmi (gpusim): only level 1 is recorded (got -r %s)" % level, 1)
    sim = Sim()
    fails = _dcgm_failures(sim)
    if as_json:
        out = _dcgm_json(sim.text("dcgmi_diag_json"), fails)
    else:
        out = _dcgm_table(sim.text("dcgmi_diag"), fails)
    if fails:
        raise Fail(out, 226)
    return out


# --------------------------------------------------------------------------- NVML
# The lab's fake libnvidia-ml.so.1 (tests/apt_repo/nvml_shim.c) reads the GPUs from this dump: one line
# "driver<TAB><version>", then one line per visible GPU of key=value fields in NVML's units (mW, enums,
# reason bits), "NA" where the recorded output has no value (the library then answers NOT_SUPPORTED). The
# values are those nvidia-smi shows for the same node, faults included.
NVML_QUERY = ["index", "name", "uuid", "pci.bus_id", "driver_version", "persistence_mode",
              "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
              "retired_pages.pending", "retired_pages.double_bit.count", "remapped_rows.correctable",
              "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure",
              "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
              "temperature.gpu", "power.draw", "power.limit", "clocks_event_reasons.hw_slowdown",
              "clocks_event_reasons.sw_thermal_slowdown", "clocks_event_reasons.hw_thermal_slowdown",
              "clocks_event_reasons.hw_power_brake_slowdown", "fabric.state", "fabric.status"]
# nvmlClocksEventReasons bits of the four reasons above (nvml.h)
NVML_REASON_BITS = {"clocks_event_reasons.hw_slowdown": 0x8, "clocks_event_reasons.sw_thermal_slowdown": 0x20,
                    "clocks_event_reasons.hw_thermal_slowdown": 0x40,
                    "clocks_event_reasons.hw_power_brake_slowdown": 0x80}
NVML_FABRIC_STATES = {"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}


def _nvml_na(value):
    return value is None or value.strip() in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]")


def _nvml_int(value, scale=1):
    if _nvml_na(value):
        return "NA"
    try:
        return str(int(round(float(value) * scale)))
    except ValueError:
        return "NA"


def _nvml_flag(value, yes=("Yes", "Enabled", "Active")):
    return "NA" if _nvml_na(value) else ("1" if value.strip() in yes else "0")


def _nvml_thresholds(block):
    """(slowdown, shutdown) in C from a -q block: absolute, or current + T.Limit margin - threshold offset."""
    def num(key):
        m = re.match(r"^(-?\d+)", (_q_get(block, "Temperature/" + key) or "").strip())
        return int(m.group(1)) if m else None
    cur, tlimit = num("GPU Current Temp"), num("GPU T.Limit Temp")
    out = []
    for name in ("Slowdown", "Shutdown"):
        value = num("GPU %s Temp" % name)
        off = num("GPU %s T.Limit Temp" % name)
        if value is None and None not in (cur, tlimit, off):
            value = cur + tlimit - off
        out.append("NA" if value is None else str(value))
    return out


def _nvml_from_q(block):
    """What the -q block says for the query fields the recorded query shows as N/A: NVML reads one source,
    nvidia-smi's two outputs are two views of it (the nvidia-smi path merges them the same way)."""
    items = _q_items(block)
    found = {}

    def first(*paths):
        for path in paths:
            for p, v in items:
                if p == path.split("/") and not _nvml_na(v):
                    return v
        return None
    for scope in ("volatile", "aggregate"):
        total, seen = 0, False
        for p, v in items:
            if p[:2] != ["ECC Errors", scope.capitalize()] or _nvml_na(v):
                continue
            leaf = p[-1]
            if (len(p) == 3 and "Uncorrectable" in leaf and "Threshold" not in leaf) or \
                    (len(p) == 4 and p[2].startswith("Double Bit") and leaf == "Total"):
                try:
                    total, seen = total + int(v), True
                except ValueError:
                    pass
        if seen:
            found["ecc.errors.uncorrected.%s.total" % scope] = str(total)
    found["retired_pages.pending"] = first("Retired Pages/Pending Page Blacklist", "Retired Pages/Pending")
    found["retired_pages.double_bit.count"] = first("Retired Pages/Double Bit ECC",
                                                    "Retired Pages/Double Bit ECC/Count")
    for field, key in (("remapped_rows.correctable", "Correctable Error"),
                       ("remapped_rows.uncorrectable", "Uncorrectable Error"),
                       ("remapped_rows.pending", "Pending"), ("remapped_rows.failure", "Remapping Failure Occurred")):
        found[field] = first("Remapped Rows/" + key)
    found["fabric.state"] = first("Fabric/State")
    found["fabric.status"] = first("Fabric/Status")
    return dict((k, v) for k, v in found.items() if v is not None)


def cmd_nvml(sim):
    rows = cmd_query_gpu(sim, ",".join(NVML_QUERY), "csv,noheader,nounits", None).rstrip("\n")
    _header, blocks = _q_blocks(cmd_q(sim, None, None))
    lines = ["driver\t%s" % (rows.split(", ")[4] if rows else "NA")]
    for n, line in enumerate(rows.split("\n") if rows else []):
        v = dict(zip(NVML_QUERY, line.split(", ")))
        for field, value in (_nvml_from_q(blocks[n]) if n < len(blocks) else {}).items():
            if _nvml_na(v[field]):
                v[field] = value
        reasons = 0
        for field, bit in NVML_REASON_BITS.items():
            if _nvml_na(v[field]):
                reasons = None
                break
            reasons |= bit if v[field].strip() == "Active" else 0
        state = NVML_FABRIC_STATES.get(v["fabric.state"].strip())
        slowdown, shutdown = _nvml_thresholds(blocks[n]) if n < len(blocks) else ("NA", "NA")
        fields = [
            ("index", v["index"]), ("name", v["name"]), ("uuid", v["uuid"]), ("bus_id", v["pci.bus_id"]),
            ("persistence", _nvml_flag(v["persistence_mode"])),
            ("ecc_volatile", _nvml_int(v["ecc.errors.uncorrected.volatile.total"])),
            ("ecc_aggregate", _nvml_int(v["ecc.errors.uncorrected.aggregate.total"])),
            ("retired_pending", _nvml_flag(v["retired_pages.pending"])),
            ("retired_dbe", _nvml_int(v["retired_pages.double_bit.count"])),
            ("remap_correctable", _nvml_int(v["remapped_rows.correctable"])),
            ("remap_uncorrectable", _nvml_int(v["remapped_rows.uncorrectable"])),
            ("remap_pending", _nvml_flag(v["remapped_rows.pending"])),
            ("remap_failure", _nvml_flag(v["remapped_rows.failure"])),
            ("pcie_gen", _nvml_int(v["pcie.link.gen.current"])),
            ("pcie_gen_max", _nvml_int(v["pcie.link.gen.max"])),
            ("pcie_width", _nvml_int(v["pcie.link.width.current"])),
            ("pcie_width_max", _nvml_int(v["pcie.link.width.max"])),
            ("temperature", _nvml_int(v["temperature.gpu"])),
            ("power_mw", _nvml_int(v["power.draw"], 1000)),
            ("limit_mw", _nvml_int(v["power.limit"], 1000)),
            ("reasons", "NA" if reasons is None else str(reasons)),
            ("fabric_state", "NA" if state in (None, 0) else str(state)),
            ("fabric_status", "NA" if state in (None, 0) else ("0" if v["fabric.status"].strip() == "Success"
                                                                else "999")),
            ("slowdown", slowdown), ("shutdown", shutdown),
        ]
        lines.append("\t".join("%s=%s" % (k, val.replace("\t", " ")) for k, val in fields))
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv if argv is None else argv
    # the lab's fake NVIDIA packages run this file for their tools and name the tool in GPUSIM_TOOL
    prog = os.environ.get("GPUSIM_TOOL") or os.path.basename(argv[0])
    try:
        if prog == "dmesg":
            sys.stdout.write(dmesg(argv[1:]))
        elif prog == "all_reduce_perf":
            sys.stdout.write(all_reduce_perf(argv[1:]))
        elif prog == "dcgmi":
            sys.stdout.write(dcgmi(argv[1:]))
        elif prog == "mpirun":
            mpirun(argv[1:])
        elif prog == "nvml":
            sys.stdout.write(cmd_nvml(Sim()))
        else:
            sys.stdout.write(nvidia_smi(argv[1:]))
    except Fail as err:
        sys.stdout.write(err.msg + ("" if err.msg.endswith("\n") else "\n"))
        return err.rc
    except BrokenPipeError:
        return 0
    return RC_OK


if __name__ == "__main__":
    sys.exit(main())
