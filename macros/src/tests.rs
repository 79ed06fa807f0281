//! Expansion-level tests: what `#[jit]` accepts, the code it generates, and where its errors
//! point (line and column in the kernel's source).

use crate::expand;

/// Expands `src` (one function); on error, each message with its 1-based line and column.
fn expand_src(src: &str) -> Result<String, Vec<(String, usize, usize)>> {
    let f: syn::ItemFn = syn::parse_str(src).expect("test source parses");
    match expand(f) {
        Ok(t) => {
            let file: syn::File = syn::parse2(t.clone()).unwrap_or_else(|e| {
                panic!("expansion does not parse: {e}\n{t}");
            });
            Ok(quote::quote!(#file).to_string())
        }
        Err(e) => Err(e
            .into_iter()
            .map(|e| {
                let s = e.span().start();
                (e.to_string(), s.line, s.column + 1)
            })
            .collect()),
    }
}

/// The single error of `src`, which must point at the first occurrence of `at`.
fn error_at(src: &str, at: &str) -> String {
    let errs = expand_src(src).expect_err("expected a compile error");
    assert_eq!(errs.len(), 1, "{errs:?}");
    let (msg, line, col) = errs[0].clone();
    let offset = src.find(at).expect("marker in source");
    let want_line = src[..offset].matches('\n').count() + 1;
    let want_col = offset - src[..offset].rfind('\n').map_or(0, |i| i + 1) + 1;
    assert_eq!((line, col), (want_line, want_col), "{msg}");
    msg
}

#[test]
fn parameters_become_pointers_scalars_and_constexprs() {
    let out = expand_src(
        "fn k(x: Ptr<F32>, mut y: Ptr<dtype>, n: i32, BLOCK: Constexpr, G: Constexpr<8>, dtype: DType) {}",
    )
    .unwrap();
    assert!(out.contains("fn k (dtype : DType)"), "{out}");
    assert!(
        out.contains("ptr (:: triton_metal :: DType :: F32 , \"x\")"),
        "{out}"
    );
    assert!(out.contains("let mut y"), "{out}");
    assert!(out.contains("ptr (dtype , \"y\")"), "{out}");
    assert!(
        out.contains("scalar (:: triton_metal :: DType :: I32 , \"n\")"),
        "{out}"
    );
    assert!(out.contains("constexpr (\"BLOCK\")"), "{out}");
    assert!(out.contains("constexpr_or (\"G\" , 8)"), "{out}");
}

#[test]
fn loops_carry_assigned_outer_variables_only() {
    let out = expand_src(
        "fn k(n: i32) {
            let mut acc = tl::zeros([4], F32);
            let mut p = tl::zeros([4], F32);
            for i in tl::range(n) {
                let t = tl::zeros([4], F32);
                acc = acc + t;
                p += 1;
            }
        }",
    )
    .unwrap();
    assert!(out.contains("(acc , p ,) = :: triton_metal :: tl :: range (0 , n , 1) . fold ((acc , p ,) , | i , (mut acc , mut p ,) |"), "{out}");
}

#[test]
fn branches_yield_assigned_variables() {
    let out = expand_src(
        "fn k(n: i32) {
            let mut a = tl::zeros([4], F32);
            if n > 0 { a = a + 1; } else if n < -1 { a = a - 1; }
            tl::static_assert(true, \"\");
        }",
    )
    .unwrap();
    assert!(
        out.contains("expand :: if_ (:: triton_metal :: tl :: expand :: gt (n , 0)"),
        "{out}"
    );
    assert!(out.contains("a = __tm_carried"), "{out}");
}

#[test]
fn early_return_moves_the_rest_into_the_else_branch() {
    let out = expand_src(
        "fn k(p: Ptr<F32>, n: i32) {
            let pid = tl::program_id(0);
            if pid >= n { tl::store(p, 0.0); return; }
            tl::store(p + pid, 1.0);
        }",
    )
    .unwrap();
    let then = out.find("store (p , 0.0)").unwrap();
    let rest = out.find("store (p + pid , 1.0)").unwrap();
    assert!(then < rest && !out.contains("return"), "{out}");
}

#[test]
fn helpers_return_values_from_branches() {
    let out = expand_src(
        "fn pick(x: Tensor, c: Tensor) -> (Tensor, Tensor) {
            if c { return (x, x + 1); }
            (x - 1, x)
        }",
    )
    .unwrap();
    assert!(
        out.contains("fn pick (x : Tensor , c : Tensor) -> (Tensor , Tensor)"),
        "{out}"
    );
    assert!(!out.contains("return"), "{out}");
}

#[test]
fn standard_library_keywords() {
    let out = expand_src(
        "fn k(p: Ptr<F32>) {
            let a = tl::sort(x, descending = true);
            let b = tl::sort(x, dim = 0);
            let c = tl::flip(x);
            let d = tl::cat(x, y, can_reorder = true);
            let e = tl::cumprod(x, 1, reverse = true);
            let f = tl::sum(x, axis = 0, dtype = F32);
            let g = tl::expand_dims(x, (0, 2));
            let h = tl::expand_dims(x, 1);
        }",
    )
    .unwrap();
    for want in [
        "tl :: sort (x , - 1 , true)",
        "tl :: sort (x , 0 , false)",
        "tl :: flip (x , - 1)",
        "tl :: cat (x , y , true)",
        "tl :: cumprod_reverse (x , 1)",
        "tl :: sum_dtype (x , 0 , F32)",
        "tl :: expand_dims_axes (x , [0 , 2])",
        "tl :: expand_dims (x , 1)",
    ] {
        assert!(out.contains(want), "{want} not in {out}");
    }
}

#[test]
fn keyword_arguments_become_the_builder_form() {
    let out = expand_src(
        "fn k(p: Ptr<F32>) {
            let x = tl::load(p, mask = m, other = 0.0);
            let s = tl::sum(x, axis = 1, keep_dims = true);
            let d = tl::dot(a, b, acc = c);
            let e = tl::dot(a, b);
            let z = tl::zeros((4, 8), dtype = F32);
            let y = x.to(F16, bitcast = true);
            tl::store(p, x, mask = m);
        }",
    )
    .unwrap();
    for want in [
        "tl :: load (p) . mask (m) . other (0.0)",
        "tl :: sum (x , :: triton_metal :: tl :: keep_dims (1))",
        "tl :: dot (a , b , c)",
        "tl :: dot (a , b , :: core :: option :: Option :: None)",
        "tl :: zeros ([4 , 8] , F32)",
        "tl :: bitcast (x , F16)",
        "tl :: store (p , x) . mask (m)",
    ] {
        assert!(out.contains(want), "{want} not in {out}");
    }
}

#[test]
fn loop_is_an_error_on_its_keyword() {
    let msg = error_at("fn k(n: i32) {\n    loop { }\n}", "loop");
    assert!(msg.contains("write `while cond"), "{msg}");
}

#[test]
fn break_is_an_error() {
    let msg = error_at(
        "fn k(n: i32) {\n    for i in tl::range(0, n, 1) { break; }\n}",
        "break",
    );
    assert!(msg.contains("`break` and `continue`"), "{msg}");
}

#[test]
fn closures_cannot_assign_outer_variables() {
    let msg = error_at(
        "fn k(n: i32) {\n    let mut acc = n;\n    let f = |x: Tensor| { acc = acc + x; };\n}",
        "acc = acc + x",
    );
    assert!(msg.contains("cannot assign `acc`"), "{msg}");
}

#[test]
fn return_inside_a_loop_is_an_error() {
    let msg = error_at(
        "fn k(n: i32) {\n    for i in tl::range(0, n, 1) {\n        if i > 2 { return; }\n    }\n}",
        "return",
    );
    assert!(msg.contains("not inside loops"), "{msg}");
}

#[test]
fn code_after_return_is_an_error() {
    let msg = error_at(
        "fn k(n: i32) {\n    return;\n    tl::debug_barrier();\n}",
        "tl::debug_barrier",
    );
    assert!(msg.contains("never runs"), "{msg}");
}

#[test]
fn unknown_keyword_names_the_arguments() {
    let msg = error_at(
        "fn k(p: Ptr<F32>) {\n    let x = tl::load(p, maks = 1);\n}",
        "maks",
    );
    assert!(
        msg.contains("no argument `maks`") && msg.contains("`mask`"),
        "{msg}"
    );
}

#[test]
fn keywords_to_other_functions_are_an_error() {
    let msg = error_at(
        "fn k(p: Ptr<F32>) {\n    let x = helper(p, scale = 2.0);\n}",
        "scale",
    );
    assert!(msg.contains("by position"), "{msg}");
}

#[test]
fn bad_parameter_type_says_what_to_write() {
    let msg = error_at("fn k(x: Vec<f32>) {}", "Vec");
    assert!(
        msg.contains("Ptr<F32>") && msg.contains("Constexpr"),
        "{msg}"
    );
}

#[test]
fn dtype_variables_must_be_pointer_dtypes() {
    let msg = error_at("fn k<T>(x: Ptr<F32>) {}", "<T>");
    assert!(
        msg.contains("no pointer") && msg.contains("dtype: DType"),
        "{msg}"
    );
    let msg = error_at("fn k<T: Copy>(x: Ptr<T>) {}", "T: Copy");
    assert!(msg.contains("without bounds"), "{msg}");
    let msg = error_at("fn k<T>(s: Scalar<T>, x: Ptr<T>) {}", "s:");
    assert!(msg.contains("declare that pointer before"), "{msg}");
}

#[test]
fn generic_pointers_take_their_arguments_dtype() {
    let out = expand_src(
        "fn k<T>(x: Ptr, mut y: Ptr<T>, z: ConstPtr<T>, w: ConstPtr, s: Scalar<T>, a: Scalar) {}",
    )
    .unwrap();
    assert!(out.contains("fn k ()"), "{out}");
    for want in [
        "let x : :: triton_metal :: tl :: Tensor = __tm_k . ptr_any (\"x\")",
        "let mut y : :: triton_metal :: tl :: Tensor = __tm_k . ptr_any (\"y\") ; \
         let T : :: triton_metal :: DType = __tm_k . dtype_of (\"y\")",
        "const_ptr (T , \"z\")",
        "const_ptr_any (\"w\")",
        "scalar (T , \"s\")",
        "let a : :: triton_metal :: tl :: Tensor = __tm_k . scalar_any (\"a\")",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
}

#[test]
fn constexprs_of_every_kind() {
    let out = expand_src(
        "fn k(A: Constexpr<&str>, B: Constexpr<\"relu\">, C: Constexpr<bool>, D: Constexpr<true>, \
         E: Constexpr<f64>, F: Constexpr<1e-5>, G: Constexpr<DType>, H: Constexpr<DType, F16>, \
         I: Constexpr<f64, 2.0>, J: Constexpr<{ -1 }>) {}",
    )
    .unwrap();
    for want in [
        "constexpr_as :: < :: std :: string :: String > (\"A\")",
        "let A : & str = __tm_cx_A . as_str ()",
        "constexpr_as_or :: < :: std :: string :: String > (\"B\" , :: std :: string :: String :: from (\"relu\"))",
        "let C : bool = __tm_k . constexpr_as :: < bool > (\"C\")",
        "let D : bool = __tm_k . constexpr_as_or :: < bool > (\"D\" , true)",
        "let E : f64 = __tm_k . constexpr_as :: < f64 > (\"E\")",
        "let F : f64 = __tm_k . constexpr_as_or :: < f64 > (\"F\" , 1e-5)",
        "let G : :: triton_metal :: DType = __tm_k . constexpr_as :: < :: triton_metal :: DType > (\"G\")",
        "constexpr_as_or :: < :: triton_metal :: DType > (\"H\" , :: triton_metal :: DType :: F16)",
        "constexpr_as_or :: < f64 > (\"I\" , 2.0)",
        "let J : i64 = __tm_k . constexpr_or (\"J\" , { - 1 })",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
    let msg = error_at("fn k(A: Constexpr<Vec<u8>, 1>) {}", "Vec");
    assert!(msg.contains("Constexpr<KIND, DEFAULT>"), "{msg}");
}

#[test]
fn dtype_attributes_are_trition_s() {
    let out = expand_src(
        "fn k(x: Ptr, y: Ptr) {\n    let v = tl::load(x);\n    tl::store(y, v.to(y.dtype.element_ty));\n    let d = v.dtype;\n}",
    )
    .unwrap();
    assert!(
        out.contains("v . to (:: triton_metal :: tl :: expand :: element_ty (y))"),
        "{out}"
    );
    assert!(
        out.contains("let d = :: triton_metal :: tl :: expand :: dtype (v)"),
        "{out}"
    );
}

#[test]
fn mutable_constexpr_is_an_error() {
    let msg = error_at("fn k(mut B: Constexpr) {}", "mut B");
    assert!(msg.contains("drop `mut`"), "{msg}");
}

#[test]
fn block_pointers_and_descriptors_take_triton_lists() {
    let out = expand_src(
        "fn k(x: Ptr<F32>, m: i32, B: Constexpr) {\n    \
         let p = tl::make_block_ptr(base = x, shape = (m, 4), strides = (4, 1), offsets = (0, m), block_shape = (B, 8), order = (1, 0));\n    \
         let p = tl::advance(p, (B, 0));\n    \
         let a = tl::load(p, boundary_check = (0, 1), padding_option = \"nan\");\n    \
         tl::store(p, a, boundary_check = 0);\n    \
         let d = tl::make_tensor_descriptor(x, shape = [m, 4], strides = [4, 1], block_shape = [B, 8], padding_option = \"nan\");\n    \
         d.store([m, 0], d.load([0, m]));\n}",
    )
    .unwrap();
    for want in [
        "tl :: make_block_ptr (x , (m , 4 ,) , (4 , 1 ,) , (0 , m ,) , [B , 8] , [1 , 0])",
        "tl :: advance (p , (B , 0 ,))",
        "tl :: load_block (p , [0 , 1] , \"nan\")",
        "tl :: store_block (p , a , [0])",
        "tl :: make_tensor_descriptor (x , (m , 4 ,) , (4 , 1 ,) , [B , 8]) . padding_option (\"nan\")",
        "d . store ((m , 0 ,) , d . load ((0 , m ,)))",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
}

#[test]
fn mask_with_boundary_check_is_an_error() {
    let msg = error_at(
        "fn k(x: Ptr<F32>) {\n    let a = tl::load(x, mask = c, boundary_check = (0,));\n}",
        "c,",
    );
    assert!(msg.contains("`mask` and `other` cannot be given"), "{msg}");
}
