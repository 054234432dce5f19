//! Format 1 account rows, kept only to migrate data directories written before format 2: the
//! account carried its cumulative per-day sums and every tracker row inside its own row.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::frac::Frac;
use crate::domain::tree::{Account, AccountId, DaySums, Grand, Kind, TrackRow};

#[derive(Deserialize)]
struct DayLedgerV1 {
    /// Cumulative sums: the entry of day d holds the sums of every day <= d.
    cum: BTreeMap<i64, DaySums>,
}

/// The format 1 account row, field for field.
#[derive(Deserialize)]
pub struct AccountV1 {
    uuid: AccountId,
    name: String,
    kind: Kind,
    parent: Option<AccountId>,
    children: Vec<AccountId>,
    balance: i64,
    allocation: i64,
    priority: i64,
    status: String,
    grand: Option<GrandV1>,
    log_len: u64,
    sub_balance: i128,
    sub_due: i128,
    days: DayLedgerV1,
    track: BTreeMap<i64, TrackRow>,
}

#[derive(Deserialize)]
struct GrandV1 {
    due_date: Option<i64>,
    fixed_amount: i64,
    amount_due: i64,
    account_type: String,
    freq: Option<u32>,
    periods: Frac,
}

/// A format 1 account as today's account plus its day rows and tracker rows.
pub struct Migrated {
    pub account: Account,
    pub days: Vec<(i64, DaySums)>,
    pub track: Vec<(i64, TrackRow)>,
}

impl AccountV1 {
    pub fn migrate(self) -> Migrated {
        let grand = self.grand.map(|g| Grand {
            due_date_secs: g.due_date,
            fixed_amount_cents: g.fixed_amount,
            amount_due_cents: g.amount_due,
            account_type: g.account_type.into(),
            freq_days: g.freq,
            periods: g.periods,
        });
        let mut account = Account::new(self.uuid, self.name.into(), self.kind, self.parent, grand);
        account.children = self.children;
        account.balance_cents = self.balance;
        account.allocation_ppm = self.allocation;
        account.priority_ppm = self.priority;
        account.status = self.status.into();
        account.log_len = self.log_len;
        account.sub_balance_cents = self.sub_balance;
        account.sub_due_cents = self.sub_due;
        // Each day's own sums are the difference of consecutive cumulative entries.
        let mut prev = DaySums::default();
        let mut days = Vec::with_capacity(self.days.cum.len());
        for (day, cum) in self.days.cum {
            days.push((day, cum.minus(&prev)));
            prev = cum;
        }
        Migrated { account, days, track: self.track.into_iter().collect() }
    }
}
