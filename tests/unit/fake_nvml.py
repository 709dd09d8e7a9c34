# -*- coding: utf-8 -*-
"""A fake pynvml module whose answers come from health records parsed from fixtures."""

import ctypes
import types

from ansible.module_utils import gpu_nvml


class NVMLError(Exception):
    pass


def make_fake_pynvml(records):
    """Build a module object exposing the pynvml calls gather_nvml uses; a None value in a
    record makes the matching call raise NVMLError (like NVML_ERROR_NOT_SUPPORTED)."""
    m = types.ModuleType('pynvml')
    m.NVMLError = NVMLError
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    m.NVML_VOLATILE_ECC = 0
    m.NVML_AGGREGATE_ECC = 1
    m.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    m.NVML_FEATURE_ENABLED = 1
    m.NVML_TEMPERATURE_GPU = 0
    m.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
    m.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    m.shutdown_called = False

    def val(v):
        if v is None:
            raise NVMLError('Not Supported')
        return v

    def rec(h):
        return records[h]

    m.nvmlInit = lambda: None

    def shutdown():
        m.shutdown_called = True
    m.nvmlShutdown = shutdown
    m.nvmlSystemGetDriverVersion = lambda: val(records[0]['driver_version']).encode()
    m.nvmlDeviceGetCount = lambda: len(records)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: val(rec(h)['name'])
    m.nvmlDeviceGetUUID = lambda h: val(rec(h)['uuid'])

    def pci(h):
        b = val(rec(h)['bus_id'])
        return types.SimpleNamespace(busId=('0000' + b.upper()).encode())  # NVML prints 8-digit domain
    m.nvmlDeviceGetPciInfo = pci
    m.nvmlDeviceGetPersistenceMode = lambda h: 1 if val(rec(h)['persistence_mode']) else 0

    def ecc(h, etype, counter):
        r = rec(h)
        return val(r['ecc_uncorrected_volatile'] if counter == 0 else r['ecc_uncorrected_aggregate'])
    m.nvmlDeviceGetTotalEccErrors = ecc
    m.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: 1 if val(rec(h)['retired_pages_pending']) else 0
    m.nvmlDeviceGetRetiredPages = lambda h, cause: [0x1000 * i for i in range(val(rec(h)['retired_pages_dbe']))]

    def remap(h):
        r = rec(h)
        if r['remapped_rows_pending'] is None:
            raise NVMLError('Not Supported')
        return (0, r['remapped_rows_uncorrectable'], int(r['remapped_rows_pending']), int(r['remapped_rows_failure']))
    m.nvmlDeviceGetRemappedRows = remap
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: val(rec(h)['pcie_gen_current'])
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: val(rec(h)['pcie_gen_max'])
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: val(rec(h)['pcie_width_current'])
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: val(rec(h)['pcie_width_max'])
    m.nvmlDeviceGetTemperature = lambda h, s: val(rec(h)['temperature_c'])

    def threshold(h, which):
        r = rec(h)
        return val(r['slowdown_temp_c'] if which == 1 else r['shutdown_temp_c'])
    m.nvmlDeviceGetTemperatureThreshold = threshold
    m.nvmlDeviceGetPowerUsage = lambda h: int(round(val(rec(h)['power_draw_w']) * 1000))
    m.nvmlDeviceGetPowerManagementLimit = lambda h: int(round(val(rec(h)['power_limit_w']) * 1000))

    def reasons(h):
        r = rec(h)
        if r['throttle_hw_slowdown'] is None:
            raise NVMLError('Not Supported')
        bits = 0
        bits |= gpu_nvml.HW_SLOWDOWN if r['throttle_hw_slowdown'] else 0
        bits |= gpu_nvml.HW_THERMAL_SLOWDOWN if r['throttle_hw_thermal'] else 0
        bits |= gpu_nvml.HW_POWER_BRAKE_SLOWDOWN if r['throttle_hw_power_brake'] else 0
        bits |= gpu_nvml.SW_THERMAL_SLOWDOWN if r['throttle_sw_thermal'] else 0
        return bits
    m.nvmlDeviceGetCurrentClocksEventReasons = reasons

    class FabricInfo(ctypes.Structure):
        """c_nvmlGpuFabricInfoV_t (the fields gather_nvml reads), filled through the pointer it is given."""
        _fields_ = [("status", ctypes.c_uint), ("state", ctypes.c_uint)]

    def fabric(h, pointer):
        info = pointer._obj  # a ctypes.byref(): the structure by value would be a caller's bug
        r = rec(h)
        if r['fabric_state'] is None:
            info.state, info.status = 0, 0
            return 0
        states = dict((v, k) for k, v in gpu_nvml.FABRIC_STATES.items())
        info.state, info.status = states[r['fabric_state']], 0 if r['fabric_status'] == 'Success' else 1
        return 0
    m.c_nvmlGpuFabricInfoV_t = FabricInfo
    m.nvmlDeviceGetGpuFabricInfoV = fabric
    return m
