//! Shape ops: broadcast, permute, join, split (reshape and expand_dims are plain copies).

use super::data::{same_kind, Data};

type Res = std::result::Result<(), String>;

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// `out[idx] = src[sum(idx[d] * strides[d])]` over `out_shape`, row by row so the last dim
/// is a slice copy (stride 1), a fill (stride 0) or a strided walk.
fn gather<T: Copy>(src: &[T], out_shape: &[usize], strides: &[usize], out: &mut Vec<T>) -> Res {
    out.clear();
    let numel: usize = out_shape.iter().product();
    if out_shape.is_empty() {
        out.extend(src.first().copied());
        return Ok(());
    }
    // Largest source offset reached, checked once so the loops below cannot go out of range.
    let max_off: usize = out_shape
        .iter()
        .zip(strides)
        .map(|(d, s)| d.saturating_sub(1) * s)
        .sum();
    if numel > 0 && max_off >= src.len() {
        return Err(format!(
            "shape {out_shape:?} with strides {strides:?} reads past a {}-element source",
            src.len()
        ));
    }
    out.reserve(numel);
    let rank = out_shape.len();
    let (n, sl) = (out_shape[rank - 1], strides[rank - 1]);
    let rows = numel.checked_div(n).unwrap_or(0);
    let mut idx = vec![0usize; rank - 1];
    let mut base = 0usize;
    for _ in 0..rows {
        match sl {
            1 => out.extend_from_slice(&src[base..base + n]),
            0 => out.extend(std::iter::repeat_n(src[base], n)),
            _ => out.extend((0..n).map(|j| src[base + j * sl])),
        }
        // Advance the row index (odometer over the leading dims).
        for d in (0..rank - 1).rev() {
            idx[d] += 1;
            base += strides[d];
            if idx[d] < out_shape[d] {
                break;
            }
            base -= strides[d] * out_shape[d];
            idx[d] = 0;
        }
    }
    Ok(())
}

/// Broadcasts `src` of shape `from` to `to` (same rank, size-1 dims stretch).
pub(crate) fn broadcast(src: &Data, from: &[usize], to: &[usize], out: &mut Data) -> Res {
    if from.len() != to.len() {
        return Err(format!("cannot broadcast {from:?} to {to:?}"));
    }
    let mut st = strides(from);
    for (d, s) in st.iter_mut().enumerate() {
        if from[d] == 1 && to[d] != 1 {
            *s = 0;
        }
    }
    same_kind!(src, out, |s, o| gather(s, to, &st, o))
}

/// Permutes dims: result dim `i` is source dim `order[i]`.
pub(crate) fn permute(src: &Data, from: &[usize], order: &[u32], out: &mut Data) -> Res {
    let st = strides(from);
    let to: Vec<usize> = order.iter().map(|&d| from[d as usize]).collect();
    let ost: Vec<usize> = order.iter().map(|&d| st[d as usize]).collect();
    same_kind!(src, out, |s, o| gather(s, &to, &ost, o))
}

/// Stacks two equal blocks along a new last dim of size 2.
pub(crate) fn join(a: &Data, b: &Data, out: &mut Data) -> Res {
    macro_rules! j {
        ($a:expr, $b:expr, $o:expr) => {{
            let o = $o;
            o.reserve($a.len() * 2);
            for (x, y) in $a.iter().zip($b) {
                o.push(*x);
                o.push(*y);
            }
            Ok(())
        }};
    }
    if a.len() != b.len() {
        return Err("join operands differ in length".into());
    }
    match (a, b) {
        (Data::Bool(a), Data::Bool(b)) => j!(a, b, out.bools()),
        (Data::I32(a), Data::I32(b)) => j!(a, b, out.i32s()),
        (Data::I64(a), Data::I64(b)) => j!(a, b, out.i64s()),
        (Data::F32(a), Data::F32(b)) => j!(a, b, out.f32s()),
        (Data::F64(a), Data::F64(b)) => j!(a, b, out.f64s()),
        (Data::Ptr(a), Data::Ptr(b)) => j!(a, b, out.ptrs()),
        _ => Err("join operands have different types".into()),
    }
}

/// Splits a block whose last dim is 2 into its even and odd elements.
pub(crate) fn split(src: &Data, lo: &mut Data, hi: &mut Data) -> Res {
    if src.len() % 2 != 0 {
        return Err("split needs an even number of elements".into());
    }
    // Two passes so each output is filled by one simple loop.
    same_kind!(src, lo, |s, o| o.extend(s.iter().step_by(2).copied()));
    same_kind!(src, hi, |s, o| o
        .extend(s.iter().skip(1).step_by(2).copied()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_and_permute() {
        let col = Data::I32(vec![1, 2, 3]);
        let mut out = Data::default();
        broadcast(&col, &[3, 1], &[3, 2], &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![1, 1, 2, 2, 3, 3]));
        let row = Data::I32(vec![1, 2]);
        broadcast(&row, &[1, 2], &[3, 2], &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![1, 2, 1, 2, 1, 2]));
        let m = Data::I32((0..6).collect());
        permute(&m, &[2, 3], &[1, 0], &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![0, 3, 1, 4, 2, 5]));
        let t = Data::I32((0..24).collect());
        permute(&t, &[2, 3, 4], &[2, 0, 1], &mut out).unwrap();
        let Data::I32(v) = &out else { panic!() };
        // out[k][i][j] = t[i][j][k]
        assert_eq!(v[0..6], [0, 4, 8, 12, 16, 20]);
        assert_eq!(v[6], 1);
    }

    #[test]
    fn join_split_round_trip() {
        let (a, b) = (Data::F32(vec![1.0, 2.0]), Data::F32(vec![3.0, 4.0]));
        let mut j = Data::default();
        join(&a, &b, &mut j).unwrap();
        assert_eq!(j, Data::F32(vec![1.0, 3.0, 2.0, 4.0]));
        let (mut x, mut y) = (Data::default(), Data::default());
        split(&j, &mut x, &mut y).unwrap();
        assert_eq!((x, y), (a, b));
    }
}
