//! The status series: the monitor stopped, then an isolated series of `GET /v1/status`.

use super::judge;
use super::report::Recorder;
use super::session::Session;
use link_os::sample::unix_ns;
use link_protocol::routes;
use link_report::{CheckName, PhaseName, StatusPoint};
use std::time::Instant;

pub(super) async fn run(rec: &mut Recorder<'_>, s: &Session<'_>) -> Result<(), String> {
    let stopped = s.monitor::<routes::host::MonitorStop>().await?;
    let t = rec.timer();
    let mut points = Vec::new();
    let mut error = None;
    for index in 0..s.config.status_points {
        let start = unix_ns();
        let at = Instant::now();
        match s.guarded("GET /v1/status", 30, s.conn.status()).await {
            Ok(resp) => points.push(StatusPoint {
                index,
                start_unix_ns: start,
                duration_ns: at.elapsed().as_nanos(),
                http_status: resp.status,
            }),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    rec.end_phase(PhaseName::StatusSeries, 0, t);
    rec.status_series(points.clone());
    if let Some(e) = error {
        return Err(e);
    }
    let after = s.monitor::<routes::host::MonitorStatus>().await?;
    rec.judge(
        CheckName::StatusSeries,
        judge::status_series(&points, &stopped, &after),
    )
}
