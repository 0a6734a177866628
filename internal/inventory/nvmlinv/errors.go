package nvmlinv

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrUnavailable is wrapped by the error Collect returns when NVML cannot be used
// on this machine at all: libnvidia-ml.so.1 is missing or the NVIDIA kernel
// driver is not loaded. The agent should then be given a static inventory file.
var ErrUnavailable = errors.New("NVML is not available on this machine")

// CallError is an NVML call that returned something other than SUCCESS. Its text
// names the call, its target and the return code, e.g.
// "nvml DeviceGetUUID(device 3): ERROR_UNKNOWN".
type CallError struct {
	Call   string      // NVML function without the "nvml" prefix, e.g. "DeviceGetUUID"
	Target string      // what it was called on, e.g. "device 3" or "device 3, link 2"; "" for system calls
	Return nvml.Return // what NVML returned
}

// Error returns "nvml <Call>(<Target>): <RETURN_CODE>".
func (e *CallError) Error() string {
	return fmt.Sprintf("nvml %s(%s): %s", e.Call, e.Target, ReturnName(e.Return))
}

// callError returns a *CallError for a failed call.
func callError(call, target string, ret nvml.Return) error {
	return &CallError{Call: call, Target: target, Return: ret}
}

// deviceTarget is the CallError target of a per-device call.
func deviceTarget(index int) string { return fmt.Sprintf("device %d", index) }

// linkTarget is the CallError target of a per-link call.
func linkTarget(index, link int) string { return fmt.Sprintf("device %d, link %d", index, link) }

// returnNames are nvml.h's names of the return codes. They are spelled here rather
// than taken from nvml.Return.Error because, once the real library is loaded,
// that method returns NVML's prose ("Unknown Error") and the code name is the
// stable, searchable part.
var returnNames = map[nvml.Return]string{
	nvml.SUCCESS:                         "SUCCESS",
	nvml.ERROR_UNINITIALIZED:             "ERROR_UNINITIALIZED",
	nvml.ERROR_INVALID_ARGUMENT:          "ERROR_INVALID_ARGUMENT",
	nvml.ERROR_NOT_SUPPORTED:             "ERROR_NOT_SUPPORTED",
	nvml.ERROR_NO_PERMISSION:             "ERROR_NO_PERMISSION",
	nvml.ERROR_ALREADY_INITIALIZED:       "ERROR_ALREADY_INITIALIZED",
	nvml.ERROR_NOT_FOUND:                 "ERROR_NOT_FOUND",
	nvml.ERROR_INSUFFICIENT_SIZE:         "ERROR_INSUFFICIENT_SIZE",
	nvml.ERROR_INSUFFICIENT_POWER:        "ERROR_INSUFFICIENT_POWER",
	nvml.ERROR_DRIVER_NOT_LOADED:         "ERROR_DRIVER_NOT_LOADED",
	nvml.ERROR_TIMEOUT:                   "ERROR_TIMEOUT",
	nvml.ERROR_IRQ_ISSUE:                 "ERROR_IRQ_ISSUE",
	nvml.ERROR_LIBRARY_NOT_FOUND:         "ERROR_LIBRARY_NOT_FOUND",
	nvml.ERROR_FUNCTION_NOT_FOUND:        "ERROR_FUNCTION_NOT_FOUND",
	nvml.ERROR_CORRUPTED_INFOROM:         "ERROR_CORRUPTED_INFOROM",
	nvml.ERROR_GPU_IS_LOST:               "ERROR_GPU_IS_LOST",
	nvml.ERROR_RESET_REQUIRED:            "ERROR_RESET_REQUIRED",
	nvml.ERROR_OPERATING_SYSTEM:          "ERROR_OPERATING_SYSTEM",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH:   "ERROR_LIB_RM_VERSION_MISMATCH",
	nvml.ERROR_IN_USE:                    "ERROR_IN_USE",
	nvml.ERROR_MEMORY:                    "ERROR_MEMORY",
	nvml.ERROR_NO_DATA:                   "ERROR_NO_DATA",
	nvml.ERROR_VGPU_ECC_NOT_SUPPORTED:    "ERROR_VGPU_ECC_NOT_SUPPORTED",
	nvml.ERROR_INSUFFICIENT_RESOURCES:    "ERROR_INSUFFICIENT_RESOURCES",
	nvml.ERROR_FREQ_NOT_SUPPORTED:        "ERROR_FREQ_NOT_SUPPORTED",
	nvml.ERROR_ARGUMENT_VERSION_MISMATCH: "ERROR_ARGUMENT_VERSION_MISMATCH",
	nvml.ERROR_DEPRECATED:                "ERROR_DEPRECATED",
	nvml.ERROR_NOT_READY:                 "ERROR_NOT_READY",
	nvml.ERROR_GPU_NOT_FOUND:             "ERROR_GPU_NOT_FOUND",
	nvml.ERROR_INVALID_STATE:             "ERROR_INVALID_STATE",
	nvml.ERROR_RESET_TYPE_NOT_SUPPORTED:  "ERROR_RESET_TYPE_NOT_SUPPORTED",
	nvml.ERROR_UNKNOWN:                   "ERROR_UNKNOWN",
}

// ReturnName returns nvml.h's name of a return code, e.g. "ERROR_UNKNOWN", or
// "nvmlReturn(N)" for a code this version of go-nvml does not know.
func ReturnName(r nvml.Return) string {
	if name, ok := returnNames[r]; ok {
		return name
	}
	return fmt.Sprintf("nvmlReturn(%d)", int32(r))
}

// initError turns a failed Init into the error the agent shows. A missing library
// or driver wraps ErrUnavailable and says what to do; anything else is a
// CallError.
func initError(ret nvml.Return) error {
	const remedy = "or run the agent with --inventory-file FILE"
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w (libnvidia-ml.so.1 not found): install the NVIDIA driver, %s", ErrUnavailable, remedy)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w (the NVIDIA kernel driver is not loaded: nvml Init: ERROR_DRIVER_NOT_LOADED): load the NVIDIA driver, %s",
			ErrUnavailable, remedy)
	}
	return callError("Init", "", ret)
}
