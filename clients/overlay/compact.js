// Covercast overlay: the compact form of `annotations` (docs/protocol.md section 12) read
// back into the verbose one, which the rest of the page uses. The decoder mirrors
// covercast/client.py's `expand_plain`; tests/test_overlay_browser.py compares the two on
// real frames.
'use strict';

window.CovercastCompact = (function () {
  /** The verbose `annotations` message a compact one stands for (any other message is
   *  returned as it is): every flag named, true or false, each modifier in full. */
  function expand(msg) {
    if (!msg || msg.type !== 'annotations' || msg.form !== 'compact') return msg;
    const names = msg.flags;
    const table = msg.modifiers;
    const annotations = msg.annotations.map((row) => {
      const flags = {};
      for (const name of names) flags[name] = false;
      for (const k of row[6]) flags[names[k]] = true;
      const a = { attacker: row[0], target: row[1], mode: row[2], loe: row[3], cover: row[4],
                  modifiers: row[5].map((k) => table[k]), flags };
      return row.length > 7 ? Object.assign(a, row[7]) : a;
    });
    const out = Object.assign({}, msg, { annotations });
    delete out.form;
    delete out.flags;
    delete out.modifiers;
    return out;
  }

  return Object.freeze({ expand });
})();
