//! `runtime-comparison.svg`: both runs' phases on one time axis, Mini above full Link.
//!
//! Each side's phases are drawn from that side's first phase start, so the two timelines line
//! up on "time since the run began". Every phase of each side is exactly one `<rect
//! class="phase">`, labelled, with its exact duration in a `<title>` tooltip.

use crate::compare::{ms, status_word, Comparison, Side};
use link_report::{Phase, Profile};

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 170.0;
const RIGHT: f64 = 20.0;
const LANE_TOP: [f64; 2] = [60.0, 210.0];
const BAR: f64 = 34.0;
const HEIGHT: f64 = 380.0;
/// Rough width of one 9-10 px sans-serif character, for fitting labels.
const LABEL_CHAR: f64 = 5.6;
const LABEL_ROW: f64 = 11.0;

/// The picture as a standalone SVG document.
pub fn render(c: &Comparison) -> String {
    let span = [&c.mini, &c.link]
        .iter()
        .map(|s| span_ns(&s.phases))
        .max()
        .unwrap_or(0)
        .max(1);
    let scale = (WIDTH - LEFT - RIGHT) / span as f64;
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
        esc(&format!(
            "Runtime phases: Mini vs full Link ({}), source {}",
            c.mode,
            short(&c.link.source)
        ))
    );
    for (lane, side) in [&c.mini, &c.link].into_iter().enumerate() {
        out.push_str(&lane_svg(side, LANE_TOP[lane], scale));
    }
    out.push_str(&axis(span, scale));
    out.push_str("</svg>\n");
    out
}

fn lane_svg(side: &Side, top: f64, scale: f64) -> String {
    let label = format!(
        "{} ({}, {})",
        title_case(side.profile),
        side.mode,
        status_word(side.outcome)
    );
    let mut out = format!(
        "<g class=\"lane\" data-side=\"{}\">\n<text x=\"10\" y=\"{:.1}\" font-weight=\"bold\">{}</text>\n\
         <text x=\"10\" y=\"{:.1}\" fill=\"#555\">{} ms in phases</text>\n",
        esc(side.profile.as_str()),
        top + BAR / 2.0,
        esc(&label),
        top + BAR / 2.0 + 14.0,
        ms(side.total_phase_ns)
    );
    let origin = side
        .phases
        .iter()
        .map(|p| p.start_unix_ns)
        .min()
        .unwrap_or(0);
    // Where each row of outside labels ends, so labels of short phases never overlap.
    let mut rows: Vec<f64> = Vec::new();
    for p in &side.phases {
        let x = LEFT + (p.start_unix_ns.saturating_sub(origin)) as f64 * scale;
        let w = (p.duration_ns as f64 * scale).max(1.0);
        out.push_str(&format!(
            "<rect class=\"phase\" data-side=\"{side}\" data-phase=\"{name}\" data-round=\"{round}\" \
             x=\"{x:.2}\" y=\"{top:.1}\" width=\"{w:.2}\" height=\"{BAR}\" fill=\"{fill}\" \
             stroke=\"#fff\" stroke-width=\"0.5\"><title>{tip}</title></rect>\n",
            side = esc(side.profile.as_str()),
            name = esc(&p.name),
            round = p.round,
            fill = colour(&p.name),
            tip = esc(&format!(
                "{} {} round {}: {} ms",
                side.profile,
                p.name,
                p.round,
                ms(p.duration_ns)
            )),
        ));
        out.push_str(&phase_label(p, x, w, top, &mut rows));
    }
    out.push_str("</g>\n");
    out
}

/// The phase's name inside its bar when it fits, else below it on the first free row.
fn phase_label(p: &Phase, x: f64, w: f64, top: f64, rows: &mut Vec<f64>) -> String {
    let text = if p.round > 0 {
        format!("{} #{}", p.name, p.round)
    } else {
        p.name.clone()
    };
    let width = text.chars().count() as f64 * LABEL_CHAR + 4.0;
    if width <= w {
        return format!(
            "<text x=\"{:.2}\" y=\"{:.1}\" font-size=\"10\" fill=\"#fff\" \
             text-anchor=\"middle\">{}</text>\n",
            x + w / 2.0,
            top + BAR / 2.0 + 4.0,
            esc(&text)
        );
    }
    let row = match rows.iter().position(|end| *end <= x) {
        Some(r) => r,
        None => {
            rows.push(f64::MIN);
            rows.len() - 1
        }
    };
    rows[row] = x + width;
    let y = top + BAR + 12.0 + row as f64 * LABEL_ROW;
    format!(
        "<line x1=\"{x:.2}\" y1=\"{:.1}\" x2=\"{x:.2}\" y2=\"{:.1}\" stroke=\"#999\" \
         stroke-width=\"0.5\"/>\n<text x=\"{x:.2}\" y=\"{y:.1}\" font-size=\"9\">{}</text>\n",
        top + BAR,
        y - 8.0,
        esc(&text)
    )
}

fn axis(span: u128, scale: f64) -> String {
    let y = LANE_TOP[1] + BAR + 100.0;
    let mut out = format!(
        "<g class=\"axis\">\n<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{:.1}\" y2=\"{y}\" stroke=\"#333\"/>\n",
        WIDTH - RIGHT
    );
    for k in 0..=4u32 {
        let t = span * k as u128 / 4;
        let x = LEFT + t as f64 * scale;
        out.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{y}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>\n\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.2} s</text>\n",
            y + 5.0,
            y + 18.0,
            t as f64 / 1e9
        ));
    }
    out.push_str("</g>\n");
    out
}

/// From the first phase's start to the last phase's end.
fn span_ns(phases: &[Phase]) -> u128 {
    let start = phases.iter().map(|p| p.start_unix_ns).min();
    let end = phases.iter().map(|p| p.end_unix_ns).max();
    match (start, end) {
        (Some(s), Some(e)) => e.saturating_sub(s),
        _ => 0,
    }
}

/// The same phase gets the same colour on both sides.
fn colour(name: &str) -> &'static str {
    const KNOWN: [(&str, &str); 10] = [
        ("startup", "#4e79a7"),
        ("cold_turn", "#f28e2b"),
        ("warm_turn", "#e15759"),
        ("second_agent", "#76b7b2"),
        ("refusals", "#edc948"),
        ("protected_tools", "#b07aa1"),
        ("scheduler", "#ff9da7"),
        ("idle", "#59a14f"),
        ("status_series", "#9c755f"),
        ("shutdown", "#7f7f7f"),
    ];
    if let Some((_, c)) = KNOWN.iter().find(|(n, _)| *n == name) {
        return c;
    }
    const OTHERS: [&str; 4] = ["#17becf", "#bcbd22", "#8c564b", "#1f77b4"];
    let h = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    OTHERS[h as usize % OTHERS.len()]
}

fn title_case(profile: Profile) -> &'static str {
    match profile {
        Profile::Mini => "Mini",
        Profile::Link => "Link",
    }
}

fn short(source: &str) -> &str {
    source.get(..12).unwrap_or(source)
}

/// Escapes text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
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

    #[test]
    fn svg_is_well_formed_with_one_bar_per_phase_per_side() {
        let c = sample();
        let doc = render(&c);
        let tags = parse(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        assert_eq!(tags[0].name, "svg");
        let rects: Vec<&Tag> = tags
            .iter()
            .filter(|t| t.name == "rect" && !t.closing)
            .collect();
        assert_eq!(rects.len(), c.mini.phases.len() + c.link.phases.len());
        for (side, phases) in [("mini", &c.mini.phases), ("link", &c.link.phases)] {
            let bars: Vec<(&str, &str)> = rects
                .iter()
                .filter(|r| attr(r, "data-side") == Some(side))
                .map(|r| {
                    (
                        attr(r, "data-phase").unwrap(),
                        attr(r, "data-round").unwrap(),
                    )
                })
                .collect();
            let want: Vec<(&str, String)> = phases
                .iter()
                .map(|p| (p.name.as_str(), p.round.to_string()))
                .collect();
            let want: Vec<(&str, &str)> = want.iter().map(|(n, r)| (*n, r.as_str())).collect();
            assert_eq!(bars, want, "{side}");
            for r in rects.iter().filter(|r| attr(r, "data-side") == Some(side)) {
                let w: f64 = attr(r, "width").unwrap().parse().unwrap();
                let x: f64 = attr(r, "x").unwrap().parse().unwrap();
                assert!(
                    w >= 1.0 && x >= LEFT && x + w <= WIDTH - RIGHT + 0.01,
                    "{r:?}"
                );
            }
        }
        // Every phase is labelled.
        for p in c.mini.phases.iter().chain(&c.link.phases) {
            assert!(doc.contains(&format!(">{}</text>", p.name)), "{}", p.name);
        }
    }

    #[test]
    fn odd_names_are_escaped() {
        let mut c = sample();
        c.mini.phases[0].name = "a<b & \"c\"".into();
        c.link.source = "<src>".into();
        let doc = render(&c);
        parse(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
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
