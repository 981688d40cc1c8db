/**
 * Foundry's entry point for the Covercast module (module.json `esmodules`): everything is in
 * core.mjs, run against Foundry's globals. Other modules reach it as
 * `game.modules.get("covercast").api` (set during init).
 */
import { install } from "./core.mjs";

install(globalThis);
