// Scraping and research: every morning, read the product pages listed in the `price_watch` Data
// Table one by one, pull the price with a CSS selector, and append it to `price_history`.
// Shows: a per-item loop that ends in nextBatch(), polite pacing with Wait, Retry on Fail for
// 429s, text responses parsed by the HTML node, and reading loop-item fields by node name.
import { expr, nextBatch, node, splitInBatches, trigger, workflow } from '@n8n/workflow-sdk';

const everyMorning = trigger({
  type: 'n8n-nodes-base.scheduleTrigger',
  version: 1.3,
  config: { name: 'Daily 06:00', parameters: { rule: { interval: [{ field: 'days', triggerAtHour: 6, triggerAtMinute: 0 }] } } },
});

// Rows: product, url, priceSelector (e.g. ".product-price .amount").
const watchlist = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Load Watchlist',
    parameters: { resource: 'row', operation: 'get', dataTableId: { __rl: true, mode: 'name', value: 'price_watch' }, returnAll: true },
    pinData: [
      { id: 1, product: 'Trail shoe X2', url: 'https://shop.example.com/p/trail-x2', priceSelector: '.price .amount' },
      { id: 2, product: 'Rain shell Lite', url: 'https://shop.example.com/p/shell-lite', priceSelector: '.price .amount' },
    ],
  },
});

const eachPage = splitInBatches({ version: 3, config: { name: 'Each Product Page', parameters: { batchSize: 1, options: {} } } });

const fetchPage = node({
  type: 'n8n-nodes-base.httpRequest',
  version: 4.2,
  config: {
    name: 'Fetch Page',
    retryOnFail: true,
    maxTries: 3,
    waitBetweenTries: 5000,
    parameters: {
      method: 'GET',
      url: expr('{{ $json.url }}'),
      sendHeaders: true,
      headerParameters: { parameters: [{ name: 'User-Agent', value: 'PriceWatchBot/1.0 (contact: ops@example.com)' }] },
      options: { timeout: 15000, response: { response: { responseFormat: 'text', outputPropertyName: 'page' } } },
    },
    pinData: [{ page: '<html><body><div class="price"><span class="amount">89,90 €</span></div></body></html>' }],
  },
});

const readPrice = node({
  type: 'n8n-nodes-base.html',
  version: 1.2,
  config: {
    name: 'Read Price',
    parameters: {
      operation: 'extractHtmlContent',
      sourceData: 'json',
      dataPropertyName: 'page',
      extractionValues: {
        values: [{ key: 'priceText', cssSelector: expr("{{ $('Load Watchlist').item.json.priceSelector }}"), returnValue: 'text' }],
      },
      options: { trimValues: true },
    },
  },
});

const shapeRow = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Shape History Row',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'product', name: 'product', value: expr("{{ $('Load Watchlist').item.json.product }}"), type: 'string' },
          {
            id: 'price',
            name: 'price',
            value: expr("{{ parseFloat(String($json.priceText || '').replace(/[^0-9,.]/g, '').replace(',', '.')) || null }}"),
            type: 'number',
          },
          { id: 'checkedAt', name: 'checkedAt', value: expr('{{ $now.toISO() }}'), type: 'string' },
        ],
      },
      options: {},
    },
  },
});

const saveRow = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Append Price',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'price_history' },
      columns: { mappingMode: 'autoMapInputData', value: {} },
      options: {},
    },
  },
});

const pause = node({
  type: 'n8n-nodes-base.wait',
  version: 1.1,
  config: { name: 'Pause 3s', parameters: { resume: 'timeInterval', amount: 3, unit: 'seconds' } },
});

export default workflow('price-watch-scraper', 'Price watch scraper')
  .add(everyMorning)
  .to(watchlist)
  .to(eachPage.onEachBatch(fetchPage.to(readPrice).to(shapeRow).to(saveRow).to(pause).to(nextBatch(eachPage))));
