//! Reduction operators over an element type's accumulator.

use super::elem::{Acc, Elem};

/// A reduction operator for element type `T`.
pub trait Reduce<T: Elem>: Copy {
    /// Start an accumulation with the first input.
    fn first(&self, x: T) -> T::Acc;
    /// Add one more input.
    fn combine(&self, acc: T::Acc, x: T) -> T::Acc;
    /// The final element.
    fn finish(&self, acc: T::Acc) -> T;
}

/// `x0 + x1 + ...`
#[derive(Clone, Copy, Debug, Default)]
pub struct Sum;
/// `x0 * x1 * ...`
#[derive(Clone, Copy, Debug, Default)]
pub struct Prod;
/// `min(x0, x1, ...)`
#[derive(Clone, Copy, Debug, Default)]
pub struct Min;
/// `max(x0, x1, ...)`
#[derive(Clone, Copy, Debug, Default)]
pub struct Max;
/// `(x0 + x1 + ...) / nranks`
#[derive(Clone, Copy, Debug)]
pub struct Avg {
    pub nranks: u32,
}
/// `s*x0 + s*x1 + ...`
#[derive(Clone, Copy, Debug)]
pub struct PreMulSum<A> {
    pub scalar: A,
}

impl<T: Elem> Reduce<T> for Sum {
    #[inline(always)]
    fn first(&self, x: T) -> T::Acc {
        x.to_acc()
    }
    #[inline(always)]
    fn combine(&self, acc: T::Acc, x: T) -> T::Acc {
        acc.add(x.to_acc())
    }
    #[inline(always)]
    fn finish(&self, acc: T::Acc) -> T {
        T::from_acc(acc)
    }
}

impl<T: Elem> Reduce<T> for Prod {
    #[inline(always)]
    fn first(&self, x: T) -> T::Acc {
        x.to_acc()
    }
    #[inline(always)]
    fn combine(&self, acc: T::Acc, x: T) -> T::Acc {
        acc.mul(x.to_acc())
    }
    #[inline(always)]
    fn finish(&self, acc: T::Acc) -> T {
        T::from_acc(acc)
    }
}

impl<T: Elem> Reduce<T> for Min {
    #[inline(always)]
    fn first(&self, x: T) -> T::Acc {
        x.to_acc()
    }
    #[inline(always)]
    fn combine(&self, acc: T::Acc, x: T) -> T::Acc {
        acc.min(x.to_acc())
    }
    #[inline(always)]
    fn finish(&self, acc: T::Acc) -> T {
        T::from_acc(acc)
    }
}

impl<T: Elem> Reduce<T> for Max {
    #[inline(always)]
    fn first(&self, x: T) -> T::Acc {
        x.to_acc()
    }
    #[inline(always)]
    fn combine(&self, acc: T::Acc, x: T) -> T::Acc {
        acc.max(x.to_acc())
    }
    #[inline(always)]
    fn finish(&self, acc: T::Acc) -> T {
        T::from_acc(acc)
    }
}

impl<T: Elem> Reduce<T> for Avg {
    #[inline(always)]
    fn first(&self, x: T) -> T::Acc {
        x.to_acc()
    }
    #[inline(always)]
    fn combine(&self, acc: T::Acc, x: T) -> T::Acc {
        acc.add(x.to_acc())
    }
    #[inline(always)]
    fn finish(&self, acc: T::Acc) -> T {
        T::from_acc(acc.div_n(self.nranks))
    }
}

impl<T: Elem> Reduce<T> for PreMulSum<T::Acc> {
    #[inline(always)]
    fn first(&self, x: T) -> T::Acc {
        x.to_acc().mul(self.scalar)
    }
    #[inline(always)]
    fn combine(&self, acc: T::Acc, x: T) -> T::Acc {
        acc.add(x.to_acc().mul(self.scalar))
    }
    #[inline(always)]
    fn finish(&self, acc: T::Acc) -> T {
        T::from_acc(acc)
    }
}
