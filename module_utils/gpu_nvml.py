# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather the gpu_health record (same keys as gpu_parsers.normalize_query_row plus
slowdown/shutdown thresholds) through NVML (the pynvml module of nvidia-ml-py)."""

from __future__ import absolute_import, division, print_function

import ctypes

from ansible.module_utils.gpu_parsers import normalize_bus_id

__metaclass__ = type

# nvmlClocksEventReasons bits (nvml.h)
HW_SLOWDOWN = 0x0000000000000008
SW_THERMAL_SLOWDOWN = 0x0000000000000020
HW_THERMAL_SLOWDOWN = 0x0000000000000040
HW_POWER_BRAKE_SLOWDOWN = 0x0000000000000080
FABRIC_STATES = {0: 'Not Supported', 1: 'Not Started', 2: 'In Progress', 3: 'Completed'}


def _text(v):
    return v.decode('utf-8', 'replace') if isinstance(v, bytes) else v


def _fabric_info(pynvml, call, handle):
    """The GPU's fabric registration, or None where NVML has no answer. Read with the versioned call and
    structure (nvmlGpuFabricInfo_v2): the unversioned structure of nvidia-ml-py 12.x does not have nvml.h's
    layout (an 80-byte cluster UUID where the library writes 16), so it would read the state from the wrong
    offset. pynvml passes the second argument through as given, so it must be a pointer (ctypes.byref): the
    structure itself would be copied onto the stack and the library would write through whatever the
    register held."""
    if not hasattr(pynvml, 'nvmlDeviceGetGpuFabricInfoV') or not hasattr(pynvml, 'c_nvmlGpuFabricInfoV_t'):
        return None
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    return info if call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info)) is not None else None


def gather_nvml(pynvml):
    """Return a list of health records read through `pynvml` (already imported)."""
    err = getattr(pynvml, 'NVMLError', Exception)

    def call(fn, *args):
        try:
            return fn(*args)
        except err:
            return None

    pynvml.nvmlInit()
    try:
        driver = _text(call(pynvml.nvmlSystemGetDriverVersion))
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pci = call(pynvml.nvmlDeviceGetPciInfo, h)
            bus = _text(getattr(pci, 'busId', None)) if pci is not None else None
            pm = call(pynvml.nvmlDeviceGetPersistenceMode, h)
            unc = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            vol = call(pynvml.nvmlDeviceGetTotalEccErrors, h, unc, pynvml.NVML_VOLATILE_ECC)
            agg = call(pynvml.nvmlDeviceGetTotalEccErrors, h, unc, pynvml.NVML_AGGREGATE_ECC)
            pend = call(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
            dbe = call(pynvml.nvmlDeviceGetRetiredPages, h,
                       pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
            remap = call(pynvml.nvmlDeviceGetRemappedRows, h)
            reasons_fn = getattr(pynvml, 'nvmlDeviceGetCurrentClocksEventReasons', None) or \
                getattr(pynvml, 'nvmlDeviceGetCurrentClocksThrottleReasons')
            reasons = call(reasons_fn, h)
            power = call(pynvml.nvmlDeviceGetPowerUsage, h)
            limit = call(pynvml.nvmlDeviceGetPowerManagementLimit, h)
            fabric = _fabric_info(pynvml, call, h)
            if fabric is not None:
                fstate = FABRIC_STATES.get(getattr(fabric, 'state', None))
                fstatus = 'Success' if getattr(fabric, 'status', None) == 0 else \
                    ('N/A' if fstate in (None, 'Not Supported') else 'Failure')
                if fstate == 'Not Supported':
                    fstate, fstatus = None, None
            else:
                fstate = fstatus = None
            out.append({
                'index': i,
                'name': _text(call(pynvml.nvmlDeviceGetName, h)),
                'uuid': _text(call(pynvml.nvmlDeviceGetUUID, h)),
                'bus_id': normalize_bus_id(bus) if bus else None,
                'driver_version': driver,
                'persistence_mode': None if pm is None else pm == pynvml.NVML_FEATURE_ENABLED,
                'ecc_uncorrected_volatile': vol,
                'ecc_uncorrected_aggregate': agg,
                'retired_pages_pending': None if pend is None else bool(pend),
                'retired_pages_dbe': None if dbe is None else len(dbe),
                'remapped_rows_pending': None if remap is None else bool(remap[2]),
                'remapped_rows_failure': None if remap is None else bool(remap[3]),
                'remapped_rows_uncorrectable': None if remap is None else remap[1],
                'pcie_gen_current': call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                'pcie_gen_max': call(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                'pcie_width_current': call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                'pcie_width_max': call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                'temperature_c': call(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
                'power_draw_w': None if power is None else round(power / 1000.0, 2),
                'power_limit_w': None if limit is None else round(limit / 1000.0, 2),
                'throttle_hw_slowdown': None if reasons is None else bool(reasons & HW_SLOWDOWN),
                'throttle_hw_thermal': None if reasons is None else bool(reasons & HW_THERMAL_SLOWDOWN),
                'throttle_hw_power_brake': None if reasons is None else bool(reasons & HW_POWER_BRAKE_SLOWDOWN),
                'throttle_sw_thermal': None if reasons is None else bool(reasons & SW_THERMAL_SLOWDOWN),
                'fabric_state': fstate,
                'fabric_status': fstatus,
                'slowdown_temp_c': call(pynvml.nvmlDeviceGetTemperatureThreshold, h,
                                        pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                'shutdown_temp_c': call(pynvml.nvmlDeviceGetTemperatureThreshold, h,
                                        pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
            })
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutdown errors must not hide the data
            pass
