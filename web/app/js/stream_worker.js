// The SharedWorker that holds this browser's one stream socket for every Spool tab of
// this origin (see stream_router.js for why and how). Started by streams.js as a module
// worker named `spool-streams`; each tab connects through its own port.

import { SocketRouter, socketUrl } from './stream_router.js';

const router = new SocketRouter(socketUrl(self.location), self.navigator?.locks ?? null);

self.onconnect = (e) => router.attach(e.ports[0]);
