//go:build linux

package doctor

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KVM ioctls (linux/kvm.h) and the structures they take, amd64.
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84
	kvmExitHlt             = 5
)

type kvmMemoryRegion struct {
	slot, flags                    uint32
	guestPhys, size, userspaceAddr uint64
}

// kvmRunWait bounds the guest's one instruction: on a nested VM whose
// KVM accepts a VM but never runs it, KVM_RUN does not return.
const kvmRunWait = 2 * time.Second

// probeKVM reports whether a KVM guest runs here: it creates a VM with one
// page holding a hlt instruction and one vCPU in real mode at it, and
// waits (kvmRunWait) for KVM_RUN to exit with KVM_EXIT_HLT. A thread stuck
// in KVM_RUN stays stuck until the process exits.
func probeKVM() error {
	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", err)
	}
	if v, err := unix.IoctlRetInt(kvm, kvmGetAPIVersion); err != nil || v != 12 {
		unix.Close(kvm)
		return fmt.Errorf("KVM_GET_API_VERSION = %d, %v; want 12", v, err)
	}
	done := make(chan error, 1)
	go func() { done <- kvmHlt(kvm) }() // owns kvm
	select {
	case err := <-done:
		return err
	case <-time.After(kvmRunWait):
		return fmt.Errorf("/dev/kvm accepts a VM, but its vCPU did not run one hlt instruction in %s: KVM guests hang here (nested virtualization without working support)", kvmRunWait)
	}
}

func kvmHlt(kvm int) error {
	defer unix.Close(kvm)
	vm, err := unix.IoctlRetInt(kvm, kvmCreateVM)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	defer unix.Close(vm)
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	mem[0] = 0xf4 // hlt
	region := kvmMemoryRegion{size: 4096, userspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if err := ioctlPtr(vm, kvmSetUserMemoryRegion, unsafe.Pointer(&region)); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %w", err)
	}
	vcpu, err := unix.IoctlRetInt(vm, kvmCreateVCPU)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	defer unix.Close(vcpu)
	size, err := unix.IoctlRetInt(kvm, kvmGetVCPUMmapSize)
	if err != nil {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	run, err := unix.Mmap(vcpu, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(run)
	// struct kvm_sregs: cs (struct kvm_segment, 24 bytes) first; base 0,
	// selector 0 puts the vCPU at physical address 0.
	var sregs [312]byte
	if err := ioctlPtr(vcpu, kvmGetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return fmt.Errorf("KVM_GET_SREGS: %w", err)
	}
	clear(sregs[0:8])   // cs.base
	clear(sregs[12:14]) // cs.selector
	if err := ioctlPtr(vcpu, kvmSetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return fmt.Errorf("KVM_SET_SREGS: %w", err)
	}
	// struct kvm_regs: 16 general registers, then rip and rflags.
	var regs [18]uint64
	if err := ioctlPtr(vcpu, kvmGetRegs, unsafe.Pointer(&regs[0])); err != nil {
		return fmt.Errorf("KVM_GET_REGS: %w", err)
	}
	regs[16], regs[17] = 0, 2
	if err := ioctlPtr(vcpu, kvmSetRegs, unsafe.Pointer(&regs[0])); err != nil {
		return fmt.Errorf("KVM_SET_REGS: %w", err)
	}
	if _, err := unix.IoctlRetInt(vcpu, kvmRun); err != nil {
		return fmt.Errorf("KVM_RUN: %w", err)
	}
	// struct kvm_run: request_interrupt_window, immediate_exit, padding,
	// then exit_reason at offset 8.
	if reason := *(*uint32)(unsafe.Pointer(&run[8])); reason != kvmExitHlt {
		return fmt.Errorf("KVM_RUN exited with reason %d, want %d (hlt)", reason, kvmExitHlt)
	}
	return nil
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}
