//! A small FileCheck for IR tests (STYLE rule 5): `.ir` files carry `// check:` lines that a
//! pass's printed output must match, in order.
//!
//! Directives (the pattern is a plain substring, whitespace-trimmed):
//! - `// check: PAT`: a later output line contains `PAT`;
//! - `// check-next: PAT`: the line right after the previous match contains `PAT`;
//! - `// check-not: PAT`: no line between the previous match and the next match contains `PAT`
//!   (before the end, if it is the last directive).
//!
//! `parse_ir` skips `//` lines, so one `.ir` file is both the input and the expectations.

/// Checks `output` against the `// check` directives found in `checks`.
pub fn filecheck(output: &str, checks: &str) -> Result<(), String> {
    let lines: Vec<&str> = output.lines().collect();
    let mut next = 0usize; // first output line not yet consumed
    let mut last_match: Option<usize> = None;
    let mut pending_not: Vec<&str> = Vec::new();
    let check_nots = |pending: &mut Vec<&str>, from: usize, to: usize| -> Result<(), String> {
        for pat in pending.drain(..) {
            if let Some(i) = (from..to).find(|&i| lines[i].contains(pat)) {
                return Err(format!(
                    "check-not `{pat}` matched line {}: {}",
                    i + 1,
                    lines[i]
                ));
            }
        }
        Ok(())
    };
    let mut seen = 0;
    for d in checks.lines().map(str::trim) {
        let Some(d) = d.strip_prefix("//") else {
            continue;
        };
        let d = d.trim_start();
        if let Some(pat) = d.strip_prefix("check-not:") {
            pending_not.push(pat.trim());
        } else if let Some(pat) = d.strip_prefix("check-next:") {
            let pat = pat.trim();
            let i = last_match.map(|m| m + 1).unwrap_or(0);
            match lines.get(i) {
                Some(l) if l.contains(pat) => {
                    check_nots(&mut pending_not, next, i)?;
                    last_match = Some(i);
                    next = i + 1;
                }
                other => {
                    return Err(format!(
                        "check-next `{pat}`: line {} is `{}`",
                        i + 1,
                        other.copied().unwrap_or("<end>")
                    ))
                }
            }
        } else if let Some(pat) = d.strip_prefix("check:") {
            let pat = pat.trim();
            let Some(i) = (next..lines.len()).find(|&i| lines[i].contains(pat)) else {
                return Err(format!(
                    "check `{pat}` not found after line {next}\n--- output ---\n{output}"
                ));
            };
            check_nots(&mut pending_not, next, i)?;
            last_match = Some(i);
            next = i + 1;
        } else {
            continue;
        }
        seen += 1;
    }
    check_nots(&mut pending_not, next, lines.len())?;
    if seen == 0 {
        return Err("no `// check` directives found".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::filecheck;

    #[test]
    fn directives() {
        let out = "a = 1\nb = add a\nc = mul b\nstore c\n";
        assert!(filecheck(
            out,
            "// check: add\n// check-next: mul\n// check-not: sub\n// check: store"
        )
        .is_ok());
        assert!(filecheck(out, "// check: mul\n// check: add").is_err());
        assert!(filecheck(out, "// check: a = 1\n// check-not: add\n// check: store").is_err());
        assert!(filecheck(out, "// check: add\n// check-next: store").is_err());
        assert!(filecheck(out, "no directives").is_err());
    }
}
