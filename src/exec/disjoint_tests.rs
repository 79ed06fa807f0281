//! Fuzzing `disjoint::disjoint_stores` against the offsets programs actually store to and
//! load from: random index expressions, grids and scalar arguments; whenever the analysis
//! calls a buffer disjoint, no offset one program stores to may be stored to or loaded from
//! by another (all lanes, all loop iterations, int32 wrap-around included).

use std::collections::{BTreeMap, HashSet};

use super::disjoint::disjoint_stores;
use crate::dtype::DType::{F32, I32};
use crate::tl::{self, Tensor};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// An int32 index expression over the program ids, one `arange(0, W)` lane, the loop's
/// induction variable and two scalar arguments.
#[derive(Clone, Debug)]
enum E {
    Pid(usize),
    Lane,
    /// The second index of a 2-D block (`arange(0, cols)` along its columns).
    Col,
    Iv,
    Arg(usize),
    Const(i32),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    /// `//`: truncating; `x // 0` is -1, as the interpreter divides.
    Div(Box<E>, Box<E>),
    /// `%`: the dividend's sign; `x % 0` is `x`.
    Rem(Box<E>, Box<E>),
    Min(Box<E>, Box<E>),
    Max(Box<E>, Box<E>),
}

/// A leaf or an operand built in the kernel: literals stay Rust integers, as a user writes them.
#[derive(Clone, Copy)]
enum B {
    T(Tensor),
    C(i32),
}

struct Env {
    pid: [Tensor; 3],
    lane: Tensor,
    col: Tensor,
    iv: Option<Tensor>,
    args: [Tensor; 2],
}

/// Columns of the 2-D blocks.
const COLS: i32 = 4;

impl E {
    fn has_col(&self) -> bool {
        match self {
            E::Col => true,
            E::Add(a, b)
            | E::Sub(a, b)
            | E::Mul(a, b)
            | E::Div(a, b)
            | E::Rem(a, b)
            | E::Min(a, b)
            | E::Max(a, b) => a.has_col() || b.has_col(),
            _ => false,
        }
    }

    fn has_iv(&self) -> bool {
        match self {
            E::Iv => true,
            E::Add(a, b)
            | E::Sub(a, b)
            | E::Mul(a, b)
            | E::Div(a, b)
            | E::Rem(a, b)
            | E::Min(a, b)
            | E::Max(a, b) => a.has_iv() || b.has_iv(),
            _ => false,
        }
    }

    fn build(&self, env: &Env) -> B {
        let bin = |a: &E,
                   b: &E,
                   f: fn(Tensor, Tensor) -> Tensor,
                   g: fn(Tensor, i32) -> Tensor,
                   h: fn(i32, Tensor) -> Tensor| {
            match (a.build(env), b.build(env)) {
                (B::T(x), B::T(y)) => B::T(f(x, y)),
                (B::T(x), B::C(c)) => B::T(g(x, c)),
                (B::C(c), B::T(y)) => B::T(h(c, y)),
                // The generator folds constant pairs, so this does not occur.
                (B::C(c), B::C(_)) => B::C(c),
            }
        };
        match self {
            E::Pid(a) => B::T(env.pid[*a]),
            E::Lane => B::T(env.lane),
            E::Col => B::T(env.col),
            E::Iv => B::T(env.iv.unwrap_or(env.pid[0])),
            E::Arg(i) => B::T(env.args[*i]),
            E::Const(c) => B::C(*c),
            E::Add(a, b) => bin(a, b, |x, y| x + y, |x, c| x + c, |c, y| c + y),
            E::Sub(a, b) => bin(a, b, |x, y| x - y, |x, c| x - c, |c, y| c - y),
            E::Mul(a, b) => bin(a, b, |x, y| x * y, |x, c| x * c, |c, y| c * y),
            E::Div(a, b) => bin(
                a,
                b,
                tl::floordiv,
                |x, c| tl::floordiv(x, c),
                |c, y| tl::floordiv(c, y),
            ),
            E::Rem(a, b) => bin(a, b, |x, y| x % y, |x, c| x % c, |c, y| c % y),
            E::Min(a, b) => bin(
                a,
                b,
                tl::minimum,
                |x, c| tl::minimum(x, c),
                |c, y| tl::minimum(c, y),
            ),
            E::Max(a, b) => bin(
                a,
                b,
                tl::maximum,
                |x, c| tl::maximum(x, c),
                |c, y| tl::maximum(c, y),
            ),
        }
    }

    /// The value for program `pid`, lane `lane` (row `lane`, column `col` of a 2-D block),
    /// induction variable `iv` (int32, wrapping).
    fn eval(&self, pid: [i32; 3], (lane, col): (i32, i32), iv: i32, args: [i32; 2]) -> i32 {
        let ev = |e: &E| e.eval(pid, (lane, col), iv, args);
        match self {
            E::Pid(a) => pid[*a],
            E::Lane => lane,
            E::Col => col,
            E::Iv => iv,
            E::Arg(i) => args[*i],
            E::Const(c) => *c,
            E::Add(a, b) => ev(a).wrapping_add(ev(b)),
            E::Sub(a, b) => ev(a).wrapping_sub(ev(b)),
            E::Mul(a, b) => ev(a).wrapping_mul(ev(b)),
            E::Div(a, b) => match ev(b) {
                0 => -1,
                y => ev(a).wrapping_div(y),
            },
            E::Rem(a, b) => match ev(b) {
                0 => ev(a),
                y => ev(a).wrapping_rem(y),
            },
            E::Min(a, b) => ev(a).min(ev(b)),
            E::Max(a, b) => ev(a).max(ev(b)),
        }
    }
}

fn konst(r: &mut Rng, w: i32) -> i32 {
    match r.below(6) {
        0 => w,
        1 => -w,
        2 => w * (1 + r.below(4) as i32),
        3 => r.below(2 * w as u64 + 1) as i32 - w,
        4 => r.pick(&[1 << 20, 1 << 28, (1 << 30) + 3, i32::MAX / 3]),
        _ => r.below(9) as i32 - 4,
    }
}

fn gen(r: &mut Rng, depth: u32, w: i32, in_loop: bool) -> E {
    if depth == 0 || r.below(3) == 0 {
        return match r.below(if in_loop { 6 } else { 5 }) {
            0 => E::Pid(r.below(3) as usize),
            1 if r.below(4) == 0 => E::Col,
            1 => E::Lane,
            2 => E::Arg(r.below(2) as usize),
            3 | 4 => E::Const(konst(r, w)),
            _ => E::Iv,
        };
    }
    let a = Box::new(gen(r, depth - 1, w, in_loop));
    let b = Box::new(gen(r, depth - 1, w, in_loop));
    if let (E::Const(x), E::Const(y)) = (&*a, &*b) {
        // Literal arithmetic happens in Rust before the kernel sees it: fold it here, and
        // keep it in int32 so that it stays an int32 literal.
        let v = match r.below(3) {
            0 => *x as i64 + *y as i64,
            1 => *x as i64 - *y as i64,
            _ => *x as i64 * *y as i64,
        };
        return E::Const(i32::try_from(v).unwrap_or(*x));
    }
    match r.below(9) {
        0 | 1 => E::Add(a, b),
        2 | 3 => E::Sub(a, b),
        4 | 5 => E::Mul(a, b),
        6 => E::Div(a, b),
        7 => E::Rem(a, b),
        _ if r.below(2) == 0 => E::Min(a, b),
        _ => E::Max(a, b),
    }
}

/// Mostly the shapes kernels use (`pid * stride + arange`, two-axis strides, loops over
/// columns), with random strides; sometimes a random tree.
fn offsets(r: &mut Rng, w: i32, in_loop: bool) -> E {
    use E::*;
    let stride = |r: &mut Rng| -> E {
        match r.below(3) {
            0 => Arg(r.below(2) as usize),
            _ => Const(konst(r, w)),
        }
    };
    match r.below(7) {
        0 => Add(
            Box::new(Mul(Box::new(Pid(r.below(3) as usize)), Box::new(stride(r)))),
            Box::new(Lane),
        ),
        1 => Add(
            Box::new(Add(
                Box::new(Mul(Box::new(Pid(1)), Box::new(stride(r)))),
                Box::new(Mul(Box::new(Pid(0)), Box::new(stride(r)))),
            )),
            Box::new(if r.below(2) == 0 {
                Lane
            } else {
                Const(konst(r, w))
            }),
        ),
        2 if in_loop => Add(
            Box::new(Mul(Box::new(Pid(0)), Box::new(stride(r)))),
            Box::new(Add(Box::new(Iv), Box::new(Lane))),
        ),
        // A 2-D tile at row block `pid0 % q` and column block `pid0 // q` (Triton's
        // grouped ordering), rows `stride` apart.
        4 => {
            let q = Const(1 + r.below(4) as i32);
            let rows = Add(
                Box::new(Mul(
                    Box::new(Rem(Box::new(Pid(0)), Box::new(q.clone()))),
                    Box::new(Const(w)),
                )),
                Box::new(Lane),
            );
            let cols = Add(
                Box::new(Mul(
                    Box::new(Div(Box::new(Pid(0)), Box::new(q))),
                    Box::new(Const(COLS)),
                )),
                Box::new(Col),
            );
            Add(
                Box::new(Mul(Box::new(rows), Box::new(stride(r)))),
                Box::new(cols),
            )
        }
        // Triton's grouped ordering: the block's row and column come from `//` and `%`
        // of the program id.
        3 => {
            let q = Const(1 + r.below(4) as i32);
            Add(
                Box::new(Add(
                    Box::new(Mul(
                        Box::new(Rem(Box::new(Pid(0)), Box::new(q.clone()))),
                        Box::new(stride(r)),
                    )),
                    Box::new(Mul(
                        Box::new(Div(Box::new(Pid(0)), Box::new(q))),
                        Box::new(stride(r)),
                    )),
                )),
                Box::new(Lane),
            )
        }
        _ => gen(r, 4, w, in_loop),
    }
}

struct Case {
    grid: [usize; 3],
    w: i32,
    args: [i32; 2],
    /// `(lo, hi, step)` of the loop around the accesses marked `in_loop`.
    range: (i32, i32, i32),
    stores: Vec<(E, bool)>,
    /// Loads of the same buffer (none in half of the cases).
    loads: Vec<(E, bool)>,
}

fn case(r: &mut Rng) -> Case {
    let w = 1 << r.below(5);
    let grid = [
        1 + r.below(5) as usize,
        r.pick(&[1, 1, 2, 3]),
        r.pick(&[1, 1, 1, 2]),
    ];
    let args = [konst(r, w), konst(r, w)];
    let range = (
        r.below(3) as i32,
        1 + r.below(40) as i32,
        r.pick(&[1, w, 2 * w, 7]),
    );
    let (n_stores, n_loads) = (1 + r.below(2) as usize, r.pick(&[0, 0, 1, 2]));
    let mut accesses = |n: usize| -> Vec<(E, bool)> {
        (0..n)
            .map(|_| {
                let in_loop = r.below(3) == 0;
                (offsets(r, w, in_loop), in_loop)
            })
            .collect()
    };
    let stores = accesses(n_stores);
    // Mostly what updates in place do (load what one stores, or next to it), sometimes any
    // offsets.
    let mut loads = accesses(n_loads);
    for l in &mut loads {
        let (e, in_loop) = stores[r.below(stores.len() as u64) as usize].clone();
        *l = match r.below(4) {
            0 | 1 => (e, in_loop),
            2 => {
                let k = konst(r, w);
                let shifted = match e {
                    // Literal pairs are folded, as the generator does.
                    E::Const(c) => E::Const(c.checked_add(k).unwrap_or(c)),
                    e => E::Add(Box::new(e), Box::new(E::Const(k))),
                };
                (shifted, in_loop)
            }
            _ => continue,
        };
    }
    Case {
        grid,
        w,
        args,
        range,
        stores,
        loads,
    }
}

/// The offsets program `pid` accesses through `exprs`.
fn accessed(c: &Case, exprs: &[(E, bool)], pid: [i32; 3]) -> HashSet<i32> {
    let mut s = HashSet::new();
    let (lo, hi, step) = c.range;
    for (e, in_loop) in exprs {
        let ivs: Vec<i32> = if *in_loop && e.has_iv() {
            (lo..hi).step_by(step as usize).collect()
        } else if *in_loop {
            // The loop runs the store once per iteration at the same offsets.
            if lo < hi {
                vec![0]
            } else {
                vec![]
            }
        } else {
            vec![0]
        };
        let cols = if e.has_col() { COLS } else { 1 };
        for iv in ivs {
            for lane in 0..c.w {
                for col in 0..cols {
                    s.insert(e.eval(pid, (lane, col), iv, c.args));
                }
            }
        }
    }
    s
}

#[test]
fn disjoint_means_no_offset_one_program_stores_is_touched_by_another() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut proved, mut refused, mut checked_pairs) = (0, 0, 0u64);
    let (mut proved_with_loads, mut proved_2d) = (0, 0);
    for _ in 0..6000 {
        let c = case(&mut r);
        let k = tl::build("fuzz", &BTreeMap::new(), |k| {
            let (out, sink) = (k.ptr(F32, "out"), k.ptr(F32, "sink"));
            let args = [k.scalar(I32, "s0"), k.scalar(I32, "s1")];
            // With a column index, lanes are rows: `arange(0, w)[:, None]`.
            let two_d = c.stores.iter().chain(&c.loads).any(|(e, _)| e.has_col());
            let env = |iv| Env {
                pid: [tl::program_id(0), tl::program_id(1), tl::program_id(2)],
                lane: if two_d {
                    tl::arange(0, c.w as i64).col()
                } else {
                    tl::arange(0, c.w as i64)
                },
                col: tl::arange(0, COLS as i64).row(),
                iv,
                args,
            };
            let store = |env: &Env, e: &E| {
                match e.build(env) {
                    B::T(t) => tl::store(out + t, 1.0f32),
                    B::C(v) => tl::store(out + v, 1.0f32),
                };
            };
            // A load's values go to `sink` (one element every program may store: not the
            // buffer under test), so the load stays in the kernel.
            let load = |env: &Env, e: &E| {
                let mut v = match e.build(env) {
                    B::T(t) => tl::load(out + t),
                    B::C(v) => tl::load(out + v),
                };
                while !v.shape().is_empty() {
                    v = tl::sum(v, 0);
                }
                tl::store(sink, v);
            };
            let accesses = c.loads.iter().map(|a| (a, true));
            for ((e, in_loop), is_load) in c.stores.iter().map(|a| (a, false)).chain(accesses) {
                let access = |env: &Env| {
                    if is_load {
                        load(env, e)
                    } else {
                        store(env, e)
                    }
                };
                if *in_loop {
                    let (lo, hi, step) = c.range;
                    tl::range(lo, hi, step).for_each(|iv| access(&env(Some(iv))));
                } else {
                    access(&env(None));
                }
            }
        });
        let k = match k {
            Ok(k) => k,
            // An offset that overflows what the DSL accepts is rejected at build: not a case.
            Err(_) => continue,
        };
        let ints = [None, None, Some(c.args[0] as i64), Some(c.args[1] as i64)];
        if !disjoint_stores(&k, c.grid, &ints)[0] {
            refused += 1;
            continue;
        }
        proved += 1;
        let pids: Vec<[i32; 3]> = (0..c.grid[2])
            .flat_map(|z| {
                (0..c.grid[1])
                    .flat_map(move |y| (0..c.grid[0]).map(move |x| [x as i32, y as i32, z as i32]))
            })
            .collect();
        let stores: Vec<HashSet<i32>> = pids.iter().map(|&p| accessed(&c, &c.stores, p)).collect();
        let loads: Vec<HashSet<i32>> = pids.iter().map(|&p| accessed(&c, &c.loads, p)).collect();
        for i in 0..pids.len() {
            for j in 0..pids.len() {
                if i == j {
                    continue;
                }
                checked_pairs += 1;
                let common: Vec<_> = stores[i]
                    .intersection(&stores[j])
                    .chain(stores[i].intersection(&loads[j]))
                    .take(3)
                    .collect();
                assert!(
                    common.is_empty(),
                    "called disjoint, but program {:?} stores to {common:?}, which program {:?} \
                     also accesses: grid {:?}, args {:?}, range {:?}, stores {:#?}, loads {:#?}",
                    pids[i],
                    pids[j],
                    c.grid,
                    c.args,
                    c.range,
                    c.stores,
                    c.loads
                );
            }
        }
        if !c.loads.is_empty() {
            proved_with_loads += 1;
        }
        if c.stores.iter().any(|(e, _)| e.has_col()) {
            proved_2d += 1;
        }
    }
    // The fuzzer must exercise both answers, and real pairs of programs.
    eprintln!(
        "proved {proved} ({proved_with_loads} with loads, {proved_2d} 2-D), refused {refused}"
    );
    assert!(
        proved > 400 && refused > 400 && proved_with_loads > 100 && proved_2d > 40,
        "proved {proved} ({proved_with_loads} with loads, {proved_2d} 2-D), refused {refused}"
    );
    assert!(checked_pairs > 1000, "{checked_pairs} pairs");
}
