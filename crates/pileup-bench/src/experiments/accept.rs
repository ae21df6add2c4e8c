//! Connection accepts: every client connects over TCP, as an application
//! does, and disconnects, again and again. MariaDB's one accept thread
//! takes each connection and hands it to a connection thread; PostgreSQL
//! forks a backend for each, trusted or authenticated with SCRAM.

use super::common::{pg_error, settings, Ctx, Variant};
use crate::drive::{Client, OpError};
use crate::error::Result;

struct MariaConnect(mysql::OptsBuilder);

impl Client for MariaConnect {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        // Dropping the connection sends COM_QUIT and closes the socket.
        mysql::Conn::new(self.0.clone()).map(drop).map_err(|e| match &e {
            mysql::Error::MySqlError(m) if m.code == 1040 => OpError::Retry(m.message.clone()),
            _ => OpError::Gone(pileup_conn::error_text(&e)),
        })
    }
}

struct PgConnect(postgres::Config);

impl Client for PgConnect {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        self.0.connect(postgres::NoTls).map(drop).map_err(pg_error)
    }
}

pub(super) fn setup<'a>(ctx: &'a Ctx) -> Result<Vec<Variant<'a>>> {
    let m = ctx.maria;
    let opts = m.tcp_opts();
    let mut v = vec![Variant {
        label: "MariaDB, TCP".into(),
        system: "MariaDB",
        settings: settings(&[]),
        apply: Box::new(|| Ok(vec![])),
        make: Box::new(move |_| Ok(Box::new(MariaConnect(opts.clone())))),
        pid: m.pid,
        counter: None,
        profiled: true,
    }];
    if let Some(pg) = ctx.pg {
        // The cluster pileup started trusts a role over TCP; a server of
        // the user's is connected to as given, with whatever its pg_hba.conf
        // asks of that connection.
        let (trust, label, auth) = match &pg.tcp_trust {
            Some(c) => (c.clone(), "PostgreSQL, TCP, trust", "trust"),
            None => (pg.trust.clone(), "PostgreSQL, the given connection", "as the server's pg_hba.conf decides"),
        };
        v.push(Variant {
            label: label.into(),
            system: "PostgreSQL",
            settings: settings(&[("authentication", auth)]),
            apply: Box::new(|| Ok(vec![])),
            make: Box::new(move |_| Ok(Box::new(PgConnect(trust.clone())))),
            pid: pg.pid,
            counter: None,
            profiled: false,
        });
        if let Some(scram) = pg.scram.clone() {
            v.push(Variant {
                label: "PostgreSQL, TCP, SCRAM-SHA-256".into(),
                system: "PostgreSQL",
                settings: settings(&[("authentication", "scram-sha-256")]),
                apply: Box::new(|| Ok(vec![])),
                make: Box::new(move |_| Ok(Box::new(PgConnect(scram.clone())))),
                pid: pg.pid,
                counter: None,
                profiled: false,
            });
        }
    }
    Ok(v)
}
