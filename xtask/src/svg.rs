//! `runtime-comparison.svg`: one row per phase, Mini and Link side by side on the row's own
//! scale (0 at the left, the row's largest sample at the right), so a 40 ms phase is as
//! visible as a 400 ms one. Per side: one `<circle class="run">` per run at that run's median,
//! the 95% bootstrap interval of the median as a bar and the median as a tick; the Link/Mini
//! ratio with its interval at the right. The fixed idle wait is drawn apart, below. Every text
//! fits inside the 1200 px wide picture.

use crate::compare::{ms, Comparison, PhaseStats};
use crate::stats::Spread;
use link_report::Profile;

const WIDTH: f64 = 1200.0;
const LABEL_X: f64 = 10.0;
/// Longest phase name shown in full (longer ones are cut with `…`).
const LABEL_CHARS: usize = 20;
const SIDE_X: f64 = 192.0;
const PLOT_L: f64 = 200.0;
const PLOT_R: f64 = 900.0;
const RATIO_X: f64 = 920.0;
const TOP: f64 = 84.0;
const ROW: f64 = 56.0;
const LANE: [f64; 2] = [16.0, 34.0];
const GAP: f64 = 30.0;
/// Width of one character, as a share of the font size (generous for sans-serif).
pub const CHAR_EM: f64 = 0.62;

fn colour(p: Profile) -> &'static str {
    match p {
        Profile::Mini => "#1f77b4",
        Profile::Link => "#d62728",
    }
}

fn title_case(profile: Profile) -> &'static str {
    match profile {
        Profile::Mini => "Mini",
        Profile::Link => "Link",
    }
}

/// At most `n` characters, cut with `…`.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).collect::<String>() + "…"
    }
}

/// Characters that fit in `px` at `size`.
fn fits(px: f64, size: f64) -> usize {
    (px / (size * CHAR_EM)).floor() as usize
}

fn text(x: f64, y: f64, size: f64, extra: &str, body: &str) -> String {
    format!(
        "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\"{extra}>{}</text>\n",
        esc(body)
    )
}

/// The picture as a standalone SVG document.
pub fn render(c: &Comparison) -> String {
    let work: Vec<&PhaseStats> = c.stats.iter().filter(|s| !s.fixed_wait).collect();
    let fixed: Vec<&PhaseStats> = c.stats.iter().filter(|s| s.fixed_wait).collect();
    let gap = if fixed.is_empty() { 0.0 } else { GAP };
    let rows_h = (work.len() + fixed.len()) as f64 * ROW + gap;
    let notes = notes(c);
    let height = TOP + rows_h + 60.0 + notes.len() as f64 * NOTE;
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#fff\"/>\n"
    );
    let title = format!(
        "Runtime phases: Mini vs full Link ({}), source {}, {} pairs of timing cycles, ROUNDS {}",
        c.mode,
        short(&c.link.source),
        c.pairs,
        c.rounds
    );
    out.push_str(&text(
        LABEL_X,
        24.0,
        15.0,
        " font-weight=\"bold\"",
        &cut(&title, fits(WIDTH - 2.0 * LABEL_X, 15.0 * 1.08)),
    ));
    out.push_str(&text(
        LABEL_X,
        44.0,
        11.0,
        " fill=\"#444\"",
        "Own scale per row, 0 ms at the left. Dot: one cycle's median. Bar: 95% bootstrap \
         interval of the median; tick: median of all cycles. Right: paired Link/Mini.",
    ));
    out.push_str(&text(LABEL_X, 70.0, 11.0, " font-weight=\"bold\"", "phase"));
    out.push_str(&text(
        PLOT_L,
        70.0,
        11.0,
        " font-weight=\"bold\"",
        "time (ms, per-row scale)",
    ));
    out.push_str(&text(
        RATIO_X,
        70.0,
        11.0,
        " font-weight=\"bold\"",
        "Link/Mini [95% interval]",
    ));
    let mut y = TOP;
    for (i, s) in work.iter().enumerate() {
        out.push_str(&row(s, y, i % 2 == 0));
        y += ROW;
    }
    if !fixed.is_empty() {
        out.push_str(&text(
            LABEL_X,
            y + 20.0,
            11.0,
            " font-style=\"italic\" fill=\"#444\"",
            "Fixed wait (the same on both sides by design; not part of any total):",
        ));
        y += gap;
        for s in &fixed {
            out.push_str(&row(s, y, true));
            y += ROW;
        }
    }
    // Legend.
    let ly = y + 24.0;
    for (i, p) in Profile::ALL.into_iter().enumerate() {
        let x = LABEL_X + 6.0 + i as f64 * 80.0;
        out.push_str(&format!(
            "<circle cx=\"{x:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{}\"/>\n",
            ly - 4.0,
            colour(p)
        ));
        out.push_str(&text(x + 10.0, ly, 11.0, "", title_case(p)));
    }
    out.push_str(&text(
        LABEL_X + 170.0,
        ly,
        11.0,
        " fill=\"#444\"",
        &cut(
            &format!("Ratio: paired Link/Mini; {}", c.method),
            fits(WIDTH - LABEL_X - 180.0, 11.0),
        ),
    ));
    for (i, note) in notes.iter().enumerate() {
        out.push_str(&text(
            LABEL_X,
            ly + 24.0 + i as f64 * NOTE,
            11.0,
            " class=\"note\" fill=\"#a40\"",
            &cut(note, fits(WIDTH - 2.0 * LABEL_X, 11.0)),
        ));
    }
    out.push_str("</svg>\n");
    out
}

/// Height of a note line under the legend.
const NOTE: f64 = 16.0;

/// What the picture must say below it: why a side has no figure at all, and every warning.
fn notes(c: &Comparison) -> Vec<String> {
    let mut out: Vec<String> = [&c.mini, &c.link]
        .into_iter()
        .filter(|s| s.outcome != link_report::Status::Passed)
        .map(|s| {
            format!(
                "{}: {}: {}",
                title_case(s.profile),
                s.outcome,
                s.reason.as_deref().unwrap_or("no reason given")
            )
        })
        .collect();
    out.extend(c.warnings.iter().map(|w| format!("warning: {w}")));
    out
}

/// A phase's name, and the phase it lies within, if any.
fn label(s: &PhaseStats) -> String {
    match &s.within {
        Some(outer) => format!("{} (in {outer})", s.name),
        None => s.name.clone(),
    }
}

/// One phase: its label, both lanes, the ratio.
fn row(s: &PhaseStats, top: f64, shade: bool) -> String {
    let mut out = format!("<g class=\"row\" data-phase=\"{}\">\n", esc(&s.name));
    if shade {
        out.push_str(&format!(
            "<rect x=\"0\" y=\"{top:.1}\" width=\"{WIDTH}\" height=\"{ROW}\" fill=\"#f4f4f4\"/>\n"
        ));
    }
    out.push_str(&text(
        LABEL_X,
        top + 24.0,
        12.0,
        " font-weight=\"bold\"",
        &cut(&label(s), LABEL_CHARS),
    ));
    let n = |sp: &Option<Spread>| sp.as_ref().map_or("—".into(), |s| s.samples.to_string());
    out.push_str(&text(
        LABEL_X,
        top + 40.0,
        9.0,
        " fill=\"#555\"",
        &format!("samples {} / {}", n(&s.mini), n(&s.link)),
    ));
    let max = [&s.mini, &s.link]
        .into_iter()
        .flatten()
        .flat_map(|sp| {
            sp.run_medians_ns
                .iter()
                .copied()
                .chain([sp.max_ns, sp.median_high_ns])
        })
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.05;
    let x = |ns: f64| PLOT_L + (ns / max).clamp(0.0, 1.0) * (PLOT_R - PLOT_L);
    for (lane, (p, sp, absent)) in [
        (Profile::Mini, &s.mini, &s.mini_absent),
        (Profile::Link, &s.link, &s.link_absent),
    ]
    .into_iter()
    .enumerate()
    {
        let cy = top + LANE[lane];
        let col = colour(p);
        out.push_str(&text(
            SIDE_X,
            cy + 3.5,
            9.0,
            &format!(" text-anchor=\"end\" fill=\"{col}\""),
            title_case(p),
        ));
        out.push_str(&format!(
            "<line x1=\"{PLOT_L}\" y1=\"{cy:.1}\" x2=\"{PLOT_R}\" y2=\"{cy:.1}\" stroke=\"#ccc\"/>\n"
        ));
        let Some(sp) = sp else {
            let why = match absent.as_deref() {
                Some("no such phase") => "— (no such phase in this profile)".to_string(),
                Some(w) => w.to_string(),
                None => "—".into(),
            };
            out.push_str(&text(
                PLOT_L + 4.0,
                cy + 3.5,
                10.0,
                " fill=\"#666\" class=\"absent\"",
                &cut(&why, fits(PLOT_R - PLOT_L - 8.0, 10.0)),
            ));
            continue;
        };
        let (lo, hi) = (x(sp.median_low_ns), x(sp.median_high_ns));
        out.push_str(&format!(
            "<rect class=\"interval\" data-side=\"{p}\" x=\"{lo:.2}\" y=\"{:.1}\" width=\"{:.2}\" \
             height=\"6\" fill=\"{col}\" fill-opacity=\"0.35\"><title>{}</title></rect>\n",
            cy - 3.0,
            (hi - lo).max(1.0),
            esc(&format!(
                "{p} {}: median {} ms, 95% interval {}–{} ms, IQR {}–{} ms, {} samples from {} runs",
                s.name,
                fms(sp.median_ns),
                fms(sp.median_low_ns),
                fms(sp.median_high_ns),
                fms(sp.q1_ns),
                fms(sp.q3_ns),
                sp.samples,
                sp.runs
            ))
        ));
        let m = x(sp.median_ns);
        out.push_str(&format!(
            "<line x1=\"{m:.2}\" y1=\"{:.1}\" x2=\"{m:.2}\" y2=\"{:.1}\" stroke=\"{col}\" stroke-width=\"2\"/>\n",
            cy - 7.0,
            cy + 7.0
        ));
        for (i, rm) in sp.run_medians_ns.iter().enumerate() {
            out.push_str(&format!(
                "<circle class=\"run\" data-side=\"{p}\" data-phase=\"{}\" data-run=\"{}\" \
                 cx=\"{:.2}\" cy=\"{cy:.1}\" r=\"3.5\" fill=\"{col}\" fill-opacity=\"0.8\">\
                 <title>{}</title></circle>\n",
                esc(&s.name),
                i + 1,
                x(*rm),
                esc(&format!(
                    "{p} {} run {}: median {} ms",
                    s.name,
                    i + 1,
                    fms(*rm)
                ))
            ));
        }
    }
    out.push_str(&text(
        PLOT_R,
        top + ROW - 4.0,
        8.0,
        " text-anchor=\"end\" fill=\"#777\"",
        &format!("scale 0–{} ms", ms(max as u128)),
    ));
    let ratio = match (&s.paired, s.link_only) {
        (Some(r), _) => r.text(),
        (None, true) => "Link-only".into(),
        (None, false) => "—".into(),
    };
    out.push_str(&text(
        RATIO_X,
        top + 30.0,
        13.0,
        " class=\"ratio\"",
        &cut(&ratio, fits(WIDTH - RATIO_X - 10.0, 13.0)),
    ));
    out.push_str("</g>\n");
    out
}

fn fms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

fn short(source: &str) -> &str {
    let end = source
        .char_indices()
        .nth(12)
        .map(|(i, _)| i)
        .unwrap_or(source.len());
    &source[..end]
}

/// Escapes text and attribute values. A control character XML 1.0 does not allow (all but
/// tab, newline and carriage return; a reason may carry one from a program's output) becomes
/// U+FFFD, so the page still parses.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => out.push('\u{FFFD}'),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::sample;

    /// Whatever a reason holds, the escaped text parses as XML and reads back the same but
    /// for the control characters XML cannot carry.
    #[test]
    fn escaped_text_is_always_well_formed_xml() {
        let text = "a<b>&\"c'\u{1b}[31m\u{0}\tend\n";
        let doc = format!("<t a=\"{}\">{}</t>", esc(text), esc(text));
        let parsed = roxmltree::Document::parse(&doc).expect("well-formed");
        let root = parsed.root_element();
        let want = "a<b>&\"c'\u{FFFD}[31m\u{FFFD}\tend\n";
        assert_eq!(root.text(), Some(want));
        // Attribute values are normalised (tab and newline read back as spaces).
        assert_eq!(
            root.attribute("a"),
            Some(&want.replace(['\t', '\n'], " ")[..])
        );
    }

    /// A start or end tag: name, attributes, and whether it closes itself.
    #[derive(Debug)]
    struct Tag {
        name: String,
        attrs: Vec<(String, String)>,
        closing: bool,
        empty: bool,
    }

    /// A minimal XML well-formedness check: tags nest and balance, one root, attributes are
    /// quoted and unique, text holds no bare `<` or unknown entities.
    fn parse(doc: &str) -> Result<Vec<Tag>, String> {
        let mut rest = doc.trim_start();
        if let Some(after) = rest.strip_prefix("<?xml") {
            rest = &after[after.find("?>").ok_or("unclosed declaration")? + 2..];
        }
        let mut tags = Vec::new();
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        loop {
            let lt = rest.find('<');
            check_text(&rest[..lt.unwrap_or(rest.len())], stack.is_empty())?;
            let Some(lt) = lt else { break };
            rest = &rest[lt..];
            let gt = rest.find('>').ok_or("unclosed tag")?;
            let tag = tag(&rest[1..gt])?;
            rest = &rest[gt + 1..];
            if tag.closing {
                let open = stack.pop().ok_or(format!("stray </{}>", tag.name))?;
                if open != tag.name {
                    return Err(format!("</{}> closes <{open}>", tag.name));
                }
            } else {
                if stack.is_empty() {
                    roots += 1;
                }
                if !tag.empty {
                    stack.push(tag.name.clone());
                }
            }
            tags.push(tag);
        }
        if !stack.is_empty() {
            return Err(format!("unclosed <{}>", stack.join("> <")));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(tags)
    }

    fn check_text(text: &str, outside: bool) -> Result<(), String> {
        if outside && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        let mut rest = text;
        while let Some(amp) = rest.find('&') {
            let end = rest[amp..].find(';').ok_or("bare &")?;
            let entity = &rest[amp + 1..amp + end];
            if !["amp", "lt", "gt", "quot", "apos"].contains(&entity) {
                return Err(format!("unknown entity &{entity};"));
            }
            rest = &rest[amp + end + 1..];
        }
        Ok(())
    }

    fn tag(inner: &str) -> Result<Tag, String> {
        let (closing, inner) = match inner.strip_prefix('/') {
            Some(i) => (true, i),
            None => (false, inner),
        };
        let (empty, inner) = match inner.strip_suffix('/') {
            Some(i) => (true, i),
            None => (false, inner),
        };
        let name_end = inner.find(char::is_whitespace).unwrap_or(inner.len());
        let name = &inner[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || ":-_".contains(c))
        {
            return Err(format!("bad tag name {name:?}"));
        }
        let mut attrs: Vec<(String, String)> = Vec::new();
        let mut rest = inner[name_end..].trim_start();
        while !rest.is_empty() {
            let eq = rest
                .find('=')
                .ok_or(format!("attribute without value in <{name}>"))?;
            let key = rest[..eq].trim().to_string();
            let after = &rest[eq + 1..];
            let quote = after.chars().next().filter(|q| *q == '"' || *q == '\'');
            let quote = quote.ok_or(format!("unquoted attribute {key} in <{name}>"))?;
            let close = after[1..].find(quote).ok_or("unclosed attribute")?;
            let value = &after[1..1 + close];
            if value.contains('<') {
                return Err(format!("< in attribute {key}"));
            }
            check_text(value, false)?;
            if attrs.iter().any(|(k, _)| *k == key) {
                return Err(format!("duplicate attribute {key} in <{name}>"));
            }
            attrs.push((key, value.to_string()));
            rest = after[close + 2..].trim_start();
        }
        if closing && (empty || !attrs.is_empty()) {
            return Err(format!("malformed closing tag </{name}>"));
        }
        Ok(Tag {
            name: name.to_string(),
            attrs,
            closing,
            empty,
        })
    }

    fn attr<'a>(t: &'a Tag, key: &str) -> Option<&'a str> {
        t.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every `<text>`: its attributes and its (unescaped-length) body.
    fn texts(doc: &str) -> Vec<(Tag, String)> {
        let mut out = Vec::new();
        let mut rest = doc;
        while let Some(at) = rest.find("<text ") {
            rest = &rest[at..];
            let gt = rest.find('>').unwrap();
            let t = tag(&rest[1..gt]).unwrap();
            let end = rest.find("</text>").unwrap();
            let body = rest[gt + 1..end]
                .replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'");
            out.push((t, body));
            rest = &rest[end..];
        }
        out
    }

    fn check_picture(c: &Comparison) -> String {
        let doc = render(c);
        let tags = parse(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        assert_eq!(tags[0].name, "svg");
        let height: f64 = attr(&tags[0], "height").unwrap().parse().unwrap();
        assert_eq!(attr(&tags[0], "width"), Some("1200"));
        // Every text lies inside the picture, judged with a generous character width.
        for (t, body) in texts(&doc) {
            let x: f64 = attr(&t, "x").unwrap().parse().unwrap();
            let y: f64 = attr(&t, "y").unwrap().parse().unwrap();
            let size: f64 = attr(&t, "font-size").unwrap_or("11").parse().unwrap();
            let w = body.chars().count() as f64 * size * CHAR_EM;
            let (l, r) = match attr(&t, "text-anchor") {
                Some("end") => (x - w, x),
                Some("middle") => (x - w / 2.0, x + w / 2.0),
                _ => (x, x + w),
            };
            assert!(
                l >= 0.0 && r <= WIDTH && y - size >= 0.0 && y <= height,
                "text outside the picture: {body:?} at {l:.0}..{r:.0}, y {y}"
            );
        }
        // One mark per run per phase per side that has figures, each inside its row's plot.
        for s in &c.stats {
            for (side, sp) in [("mini", &s.mini), ("link", &s.link)] {
                let marks: Vec<&Tag> = tags
                    .iter()
                    .filter(|t| {
                        t.name == "circle"
                            && attr(t, "class") == Some("run")
                            && attr(t, "data-side") == Some(side)
                            && attr(t, "data-phase") == Some(esc(&s.name).as_str())
                    })
                    .collect();
                let want = sp.as_ref().map_or(0, |sp| sp.run_medians_ns.len());
                assert_eq!(marks.len(), want, "{side} {}", s.name);
                for m in marks {
                    let cx: f64 = attr(m, "cx").unwrap().parse().unwrap();
                    assert!((PLOT_L..=PLOT_R).contains(&cx), "{cx}");
                }
            }
        }
        doc
    }

    #[test]
    fn svg_is_well_formed_with_one_mark_per_run_per_phase_per_side() {
        let c = crate::compare::tests::comparison_of_cycles(12, 1.0, 1.0);
        let doc = check_picture(&c);
        // Every phase has a row, its label, and its ratio in the picture's own format.
        for s in &c.stats {
            assert!(doc.contains(&format!(">{}</text>", s.name)), "{}", s.name);
        }
        let startup = c.stats.iter().find(|s| s.name == "startup").unwrap();
        assert!(doc.contains(&startup.paired.unwrap().text()));
        assert!(doc.contains("12 pairs of timing cycles"));
        // Idle is drawn apart, after every other phase.
        let idle = doc.find("data-phase=\"idle\"").unwrap();
        let shutdown = doc
            .find("<g class=\"row\" data-phase=\"shutdown\"")
            .unwrap();
        assert!(shutdown < idle);
        assert!(doc.contains("Fixed wait"));
    }

    #[test]
    fn a_skipped_side_shows_its_reason_not_a_zero() {
        let mut c = sample();
        for s in &mut c.stats {
            s.link = None;
            s.link_absent = Some("skipped: bubblewrap cannot create a user namespace, which this picture must cut to fit its plot area rather than run past the edge of the picture".into());
            s.ratio = None;
            s.paired = None;
            s.link_only = false;
        }
        let doc = check_picture(&c);
        assert!(doc.contains("skipped: bubblewrap"), "{doc}");
        assert!(!doc.contains("data-side=\"link\" data-phase"));
        assert!(doc.contains("class=\"ratio\">—</text>"));
    }

    #[test]
    fn a_failed_side_and_every_warning_are_written_below_the_picture() {
        let mut c = sample();
        c.link.outcome = link_report::Status::Failed;
        c.link.reason = Some("new cycle 4: link-plugin-auth killed by signal 9".into());
        c.warnings = vec!["the machine was busy".into()];
        for s in &mut c.stats {
            s.link = None;
            s.ratio = None;
            s.paired = None;
        }
        let doc = check_picture(&c);
        assert!(doc.contains("Link: failed: new cycle 4: link-plugin-auth killed by signal 9"));
        assert!(doc.contains("class=\"note\" fill=\"#a40\">warning: the machine was busy"));
    }

    #[test]
    fn odd_names_are_escaped() {
        let mut c = sample();
        c.stats[0].name = "a<b & \"c\" and a very long phase name indeed".into();
        c.link.source = "<src>".into();
        check_picture(&c);
    }

    #[test]
    fn the_checker_rejects_broken_documents() {
        assert!(parse("<svg><g></svg>").is_err());
        assert!(parse("<svg><rect x=1/></svg>").is_err());
        assert!(parse("<svg>a & b</svg>").is_err());
        assert!(parse("<svg/><svg/>").is_err());
        assert!(parse("<svg><rect x=\"1\" x=\"2\"/></svg>").is_err());
        assert!(parse("<svg><g></g></svg>").is_ok());
    }
}
