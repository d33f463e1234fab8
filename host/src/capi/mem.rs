//! Memory: `ncclMemAlloc`/`ncclMemFree` (window-ready memory, see
//! [`crate::window::mem_alloc_on`]), `ncclCommRegister`/`ncclCommDeregister`, and symmetric
//! windows (`ncclCommWindowRegister`/`ncclCommWindowDeregister`, `ncclWinGetUserPtr`).
//!
//! `ncclCommRegister` records the buffer and returns a handle: oxccl's transports read and
//! write any device buffer directly (in-process peers) or through its staging segments
//! (across processes), so a registration has nothing more to prepare; deregistering checks
//! the handle. Windows need `ncclMemAlloc` memory; any other buffer is refused with the
//! reason (NCCL would fall back to an unregistered path; oxccl says so instead).

use std::ffi::{c_int, c_void};

use super::error::{put, CError};
use super::group;
use super::handle::{CComm, CWin};
use super::init::NcclComm;

/// `ncclWindow_t`.
pub type NcclWindow = *mut c_void;

api! {
    /// Window-ready memory on the current device (zeroed; the size is rounded up to the
    /// mapping granularity).
    fn ncclMemAlloc / pncclMemAlloc(ptr: *mut *mut c_void, size: usize) {
        const OP: &str = "ncclMemAlloc";
        if ptr.is_null() {
            return Err(CError::arg(OP, "ptr is NULL"));
        }
        if size == 0 {
            return Err(CError::arg(OP, "size is 0"));
        }
        let b = super::backend();
        let dev = super::current_device(&*b)?;
        let p = crate::window::mem_alloc_on(&*b, dev, 0, size)?;
        // SAFETY: checked non-null.
        unsafe { put(OP, "ptr", ptr, p as *mut c_void) }
    }
}

api! {
    fn ncclMemFree / pncclMemFree(ptr: *mut c_void) {
        const OP: &str = "ncclMemFree";
        if ptr.is_null() {
            return Ok(()); // like free(NULL)
        }
        let b = super::backend();
        // SAFETY: caller contract (no kernel uses the memory any more).
        unsafe { crate::window::mem_free_on(&*b, 0, ptr as u64) }.map_err(|e| {
            let mut c = CError::from(e);
            c.message = format!("{OP}: {}", c.message);
            c
        })
    }
}

api! {
    /// Records the buffer (see the module documentation) and returns its handle.
    fn ncclCommRegister / pncclCommRegister(comm: NcclComm, buff: *mut c_void, size: usize, handle: *mut *mut c_void) {
        const OP: &str = "ncclCommRegister";
        let cc = CComm::get(OP, super::key(comm))?;
        cc.comm(OP)?;
        if buff.is_null() || size == 0 {
            return Err(CError::arg(OP, format!("buffer {buff:?} of {size} bytes: a non-empty buffer is needed")));
        }
        if (buff as u64).checked_add(size as u64).is_none() {
            return Err(CError::arg(OP, "the buffer wraps around the address space"));
        }
        if handle.is_null() {
            return Err(CError::arg(OP, "handle is NULL"));
        }
        let h = super::handle::next_handle();
        cc.regs.lock().unwrap_or_else(|p| p.into_inner()).insert(h, (buff as u64, size));
        // SAFETY: caller contract.
        unsafe { put(OP, "handle", handle, h as *mut c_void) }
    }
}

api! {
    fn ncclCommDeregister / pncclCommDeregister(comm: NcclComm, handle: *mut c_void) {
        const OP: &str = "ncclCommDeregister";
        let cc = CComm::get(OP, super::key(comm))?;
        let found = cc.regs.lock().unwrap_or_else(|p| p.into_inner()).remove(&(handle as usize));
        match found {
            Some(_) => Ok(()),
            None => Err(CError::arg(OP, format!("handle {handle:?} is not a registration of this communicator"))),
        }
    }
}

api! {
    /// Collective: every rank registers its buffer (from `ncclMemAlloc`). In a group the
    /// window handle is written by the outermost `ncclGroupEnd`.
    fn ncclCommWindowRegister / pncclCommWindowRegister(
        comm: NcclComm,
        buff: *mut c_void,
        size: usize,
        win: *mut NcclWindow,
        flags: c_int,
    ) {
        const OP: &str = "ncclCommWindowRegister";
        if win.is_null() {
            return Err(CError::arg(OP, "win is NULL"));
        }
        // 0x4 is NCCL_WIN_GIN_ONLY in later NCCL headers (registration for GIN only); this
        // build has no GIN (ncclCommQueryProperties says so), so such a window is registered
        // for load/store like any other: a superset of what was asked, never less.
        if !(0..=7).contains(&flags) {
            return Err(CError::arg(OP, format!("winFlags {flags:#x} has unknown bits (NCCL_WIN_* are 0x1, 0x2, 0x4)")));
        }
        let cc = CComm::get(OP, super::key(comm))?;
        let c = cc.comm(OP)?;
        let (handle, out, addr) = (cc.handle, win as usize, buff as u64);
        // SAFETY: checked non-null.
        unsafe { win.write(std::ptr::null_mut()) };
        group::run_or_defer(OP, move || {
            let w = c.register_window(addr, size, (flags & 0x3) as u32)?;
            let h = CWin::insert(handle, w, addr);
            // SAFETY: nccl.h's contract: `win` stays valid until the group ends.
            unsafe { (out as *mut NcclWindow).write(h as NcclWindow) };
            Ok(())
        })
    }
}

api! {
    /// Collective: waits for this rank's work, meets the other ranks, unmaps.
    fn ncclCommWindowDeregister / pncclCommWindowDeregister(comm: NcclComm, win: NcclWindow) {
        const OP: &str = "ncclCommWindowDeregister";
        let cc = CComm::get(OP, super::key(comm))?;
        let w = CWin::get(OP, win as usize)?;
        if w.comm != cc.handle {
            return Err(CError::arg(OP, "the window was registered on another communicator"));
        }
        let c = cc.comm_even_revoked(OP)?;
        CWin::remove(w.handle);
        let window = w.window.lock().unwrap_or_else(|p| p.into_inner()).take();
        group::run_or_defer(OP, move || match window {
            Some(window) => c.deregister_window(window).map_err(CError::from),
            None => Ok(()),
        })
    }
}

api! {
    fn ncclWinGetUserPtr / pncclWinGetUserPtr(comm: NcclComm, win: NcclWindow, out: *mut *mut c_void) {
        const OP: &str = "ncclWinGetUserPtr";
        let cc = CComm::get(OP, super::key(comm))?;
        let w = CWin::get(OP, win as usize)?;
        if w.comm != cc.handle {
            return Err(CError::arg(OP, "the window was registered on another communicator"));
        }
        // SAFETY: caller contract.
        unsafe { put(OP, "outUserPtr", out, w.user_ptr as *mut c_void) }
    }
}
