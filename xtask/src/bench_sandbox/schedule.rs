//! What the benchmark runs, in which order: the three turns, the rounds with and without them,
//! and the raw samples they give.

/// The three turns the benchmark times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// `run: true`: one confined command through the run tool and the sandbox plugin.
    Run,
    /// `list`: one call of the file tool, which starts no sandbox: a tool step's own cost.
    Tool,
    /// `hello`: no tool call.
    Plain,
}

impl Turn {
    /// What the turn asks the local model.
    pub fn message(self) -> &'static str {
        match self {
            Turn::Run => "run: true",
            Turn::Tool => "list",
            Turn::Plain => "hello",
        }
    }

    /// The one tool the reply must have called, if any.
    pub(super) fn tool(self) -> Option<&'static str> {
        match self {
            Turn::Run => Some("run"),
            Turn::Tool => Some("file"),
            Turn::Plain => None,
        }
    }
}

/// The raw samples, nanoseconds, in the order they ran.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Samples {
    pub bare_bwrap: Vec<f64>,
    pub cli_exec: Vec<f64>,
    pub run_turn: Vec<f64>,
    pub tool_turn: Vec<f64>,
    pub plain_turn: Vec<f64>,
}

/// One command of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Bare,
    Exec,
    Turn(Turn),
}

/// Every order of the three turns: each turn precedes each other one in half of them.
const TURN_ORDERS: [[Turn; 3]; 6] = {
    use Turn::*;
    [
        [Run, Tool, Plain],
        [Plain, Run, Tool],
        [Tool, Plain, Run],
        [Run, Plain, Tool],
        [Tool, Run, Plain],
        [Plain, Tool, Run],
    ]
};

/// The steps of timed round `index` (0-based; warm-up rounds are `None`, all with turns):
/// `turn_rounds` of the `rounds` rounds, evenly spaced, carry the three turns. Bare bwrap and
/// the CLI exec take turns at running first; in a turn round the turns come in each of their
/// six orders in turn, with bwrap runs before the first turn and between the first and second,
/// so over every twelve turn rounds each turn precedes each other one equally often.
pub fn schedule(index: Option<u32>, rounds: u32, turn_rounds: u32, turn_index: u32) -> Vec<Step> {
    let turns = match index {
        None => true,
        Some(i) => {
            let (i, n, t) = (
                u64::from(i),
                u64::from(rounds.max(1)),
                u64::from(turn_rounds),
            );
            (i + 1) * t / n > i * t / n
        }
    };
    let k = if turns {
        turn_index
    } else {
        index.unwrap_or(0)
    } as usize;
    let (first, second) = if k.is_multiple_of(2) {
        (Step::Bare, Step::Exec)
    } else {
        (Step::Exec, Step::Bare)
    };
    if !turns {
        return vec![first, second];
    }
    let [a, b, c] = TURN_ORDERS[(k / 2) % TURN_ORDERS.len()].map(Step::Turn);
    vec![first, a, second, b, c]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_rounds_are_spread_evenly_and_orders_balance() {
        use Turn::*;
        let (rounds, turns) = (120, 48);
        let mut with_turns = Vec::new();
        let mut turn_index = 0;
        let mut bare_first = 0;
        // How often the first of each pair of turns ran before the second.
        let pairs = [(Run, Plain), (Run, Tool), (Tool, Plain)];
        let mut before = [0; 3];
        for i in 0..rounds {
            let steps = schedule(Some(i), rounds, turns, turn_index);
            let at = |s| steps.iter().position(|x| *x == s).unwrap();
            if steps.contains(&Step::Turn(Run)) {
                assert_eq!(steps.len(), 5, "{steps:?}");
                turn_index += 1;
                with_turns.push(i);
                for (n, (a, b)) in pairs.iter().enumerate() {
                    before[n] += usize::from(at(Step::Turn(*a)) < at(Step::Turn(*b)));
                }
                if at(Step::Bare) < at(Step::Exec) {
                    bare_first += 1;
                }
            } else {
                let pair = if i.is_multiple_of(2) {
                    [Step::Bare, Step::Exec]
                } else {
                    [Step::Exec, Step::Bare]
                };
                assert_eq!(steps, pair);
            }
        }
        assert_eq!(with_turns.len(), 48);
        // Evenly spaced: no gap between turn rounds above ceil(120/48).
        assert!(
            with_turns.windows(2).all(|w| w[1] - w[0] <= 3),
            "{with_turns:?}"
        );
        assert_eq!(
            before,
            [24, 24, 24],
            "each turn before each other one in half the rounds"
        );
        assert_eq!(bare_first, 24);
        // Every round has turns when there are as many turn rounds as rounds; warm-up too.
        assert!((0..10).all(|i| schedule(Some(i), 10, 10, i).len() == 5));
        assert_eq!(schedule(None, 10, 0, 0).len(), 5);
        assert!((0..10).all(|i| schedule(Some(i), 10, 0, 0).len() == 2));
    }
}
