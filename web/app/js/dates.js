// Date groups for the sidebar's session lists: Today, Yesterday, Previous 7 days,
// Older, by each session's last activity (`updatedAt`) in the browser's time zone.
// Lists arrive newest first, so a group is a run of consecutive sessions and each
// heading is placed before its first one. Calendar days, not 24-hour spans: a session
// from 23:50 is "Yesterday" at 00:10.

import { h } from './dom.js';

const DAY = 86_400_000;

/** Midnight (local) of the day `t` falls in. */
function midnight(t) {
  const d = new Date(t);
  d.setHours(0, 0, 0, 0);
  return d.getTime();
}

/** The group name of a time, relative to `now`. */
export function dateGroup(t, now = Date.now()) {
  const today = midnight(now);
  if (t >= today) return 'Today';
  // Day lengths vary with daylight saving time; comparing midnights keeps it calendar days.
  const days = Math.round((today - midnight(t)) / DAY);
  if (days <= 1) return 'Yesterday';
  if (days <= 7) return 'Previous 7 days';
  return 'Older';
}

/** `sessions` as list items with a heading item before each date group. */
export function groupByDate(sessions, row, now = Date.now()) {
  const items = [];
  let last = null;
  for (const s of sessions) {
    const group = dateGroup(s.updatedAt, now);
    if (group !== last) {
      // A list item of its own (a list holds only items): read as the group's name.
      items.push(h('li', { class: 'date-group', dataset: { group } }, group));
      last = group;
    }
    items.push(row(s));
  }
  return items;
}
